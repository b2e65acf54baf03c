// Fused GPU optimizer updates against double-precision references of the PyTorch formulas
// (computed with the same fp32-rounded step scalars the kernels receive), over several steps,
// with the optional half copy, device-side scalars and misaligned regions; and in mixed precision,
// with a prefix of the parameters whose fp16/bf16 gradients the update reads and whose copies it
// writes, under loss scaling, including a skipped step. LARS against its rule in double
// (lars_reference_test.h), the same ways, and in compiled programs.
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "ops/optimizer/fp16_program_gpu_test.h"
#include "ops/optimizer/lars_reference_test.h"
#include "ops/optimizer/optimizer_cuda.h"
#include "ops/optimizer/update_regions_gpu_test.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace gpu_test;
using namespace update_test;

struct Case {
  int64_t n;
  size_t offset = 0;  // floats; 1 misaligns every region
};
const std::vector<Case> kCases = {{1}, {13}, {1000}, {100003}, {1000, 1}, {100003, 1}};
constexpr int kSteps = 3;

std::string label(const Case& k) {
  return "n=" + std::to_string(k.n) + " offset=" + std::to_string(k.offset);
}

struct SgdVariant {
  const char* name;
  double lr, momentum, weight_decay;
  bool nesterov;
};

TEST(OptimizerGpu, SgdMatchesReference) {
  KILN_REQUIRE_GPU();
  const SgdVariant variants[] = {{"plain", 0.1, 0.0, 0.0, false},
                                 {"weight decay", 0.1, 0.0, 1e-2, false},
                                 {"momentum", 0.05, 0.9, 1e-4, false},
                                 {"nesterov", 0.05, 0.9, 5e-4, true}};
  std::mt19937 rng(41);
  for (const SgdVariant& v : variants)
    for (const Case& k : kCases) {
      SCOPED_TRACE(std::string(v.name) + " " + label(k));
      const cuda::SgdScalars s = cuda::sgd_scalars(v.lr, v.momentum, v.weight_decay, v.nesterov);
      const double lr = s.lr, mom = s.momentum, wd = s.weight_decay;  // what the kernel sees
      std::vector<double> p = random_values(DType::F32, k.n, rng), buf(k.n, 0.0);
      DeviceTensor dp(DType::F32, p, k.offset), dbuf(DType::F32, buf, k.offset),
          grad(DType::F32, k.n, k.offset), copy(DType::F16, k.n, k.offset);
      const bool use_buf = v.momentum != 0;
      for (int step = 0; step < kSteps; ++step) {
        const std::vector<double> g = random_values(DType::F32, k.n, rng);
        grad.set(g);
        copy.poison();
        cuda::sgd_update(k.n, grad.f32(), dp.f32(), use_buf ? dbuf.f32() : nullptr, s, nullptr,
                         "test", nullptr, cuda::ComputeCopies{k.n, DType::F16, nullptr, copy.ptr()});
        sync();
        for (int64_t i = 0; i < k.n; ++i) {
          double gi = g[i] + (wd != 0 ? wd * p[i] : 0.0);
          if (use_buf) {
            buf[i] = mom * buf[i] + gi;
            gi = v.nesterov ? gi + mom * buf[i] : buf[i];
          }
          p[i] -= lr * gi;
        }
        SCOPED_TRACE("step " + std::to_string(step + 1));
        const std::vector<double> got_p = dp.get();
        expect_close("param", got_p, p, 1e-6);
        if (use_buf) expect_close("momentum buffer", dbuf.get(), buf, 1e-6);
        expect_exact_copy(copy, got_p);
      }
    }
}

TEST(OptimizerGpu, AdamWMatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(42);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 1e-2;
  for (const Case& k : kCases)
    for (DType copy_dtype : {DType::F16, DType::BF16}) {
      SCOPED_TRACE(label(k) + " copy " + name(copy_dtype));
      std::vector<double> p = random_values(DType::F32, k.n, rng), m(k.n, 0.0), v(k.n, 0.0);
      DeviceTensor dp(DType::F32, p, k.offset), dm(DType::F32, m, k.offset),
          dv(DType::F32, v, k.offset), grad(DType::F32, k.n, k.offset),
          copy(copy_dtype, k.n, k.offset);
      for (int step = 1; step <= kSteps; ++step) {
        const cuda::AdamWScalars s = cuda::adamw_scalars(lr, b1, b2, eps, wd, step);
        const std::vector<double> g = random_values(DType::F32, k.n, rng, 0.0, 0.1);
        grad.set(g);
        copy.poison();
        cuda::adamw_update(k.n, grad.f32(), dp.f32(), dm.f32(), dv.f32(), s, nullptr, "test",
                           nullptr, cuda::ComputeCopies{k.n, copy_dtype, nullptr, copy.ptr()});
        sync();
        // PyTorch's AdamW with the fp32 scalars the kernel receives.
        const double step_size = s.step_size, bias2_sqrt = s.bias2_sqrt;
        for (int64_t i = 0; i < k.n; ++i) {
          m[i] = double(s.beta1) * m[i] + double(s.one_minus_beta1) * g[i];
          v[i] = double(s.beta2) * v[i] + double(s.one_minus_beta2) * g[i] * g[i];
          p[i] = p[i] * double(s.keep) -
                 step_size * m[i] / (std::sqrt(v[i]) / bias2_sqrt + double(s.eps));
        }
        SCOPED_TRACE("step " + std::to_string(step));
        const std::vector<double> got_p = dp.get();
        expect_close("param", got_p, p, 1e-6);
        expect_close("exp_avg", dm.get(), m, 1e-6);
        expect_close("exp_avg_sq", dv.get(), v, 1e-6);
        expect_exact_copy(copy, got_p);
      }
    }
}

// --- Mixed precision: a compute prefix ---

TEST(OptimizerGpu, SgdWithAComputePrefixMatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(45);
  const cuda::SgdScalars s = cuda::sgd_scalars(0.05, 0.9, 5e-4, true);
  const double lr = s.lr, mom = s.momentum, wd = s.weight_decay;
  for (DType dtype : {DType::F16, DType::BF16})
    for (const PrefixCase& k : kPrefixCases) {
      SCOPED_TRACE(label(k, dtype));
      std::vector<double> p = random_values(DType::F32, size_t(k.n), rng), buf(size_t(k.n), 0.0);
      PrefixRegions r(k, dtype, p);
      DeviceTensor dbuf(DType::F32, buf, k.offset);
      for (int step = 0; step < kSteps; ++step) {
        SCOPED_TRACE("step " + std::to_string(step + 1));
        const std::vector<double> g = r.next_gradients(rng, 1.0);
        cuda::sgd_update(k.n, r.fp32(), r.param.f32(), dbuf.f32(), s, nullptr, "test", nullptr, r.compute(),
                         r.scaling());
        sync();
        for (int64_t i = 0; i < k.n; ++i) {
          double gi = g[i] + wd * p[i];
          buf[i] = mom * buf[i] + gi;
          p[i] -= lr * (gi + mom * buf[i]);
        }
        const std::vector<double> got_p = r.param.get();
        expect_close("param", got_p, p, 1e-6);
        expect_close("momentum buffer", dbuf.get(), buf, 1e-6);
        r.expect_copy_of(got_p);
      }
      // A flagged step (FIND_NONFINITE found inf/NaN) changes nothing, the copy included.
      r.next_gradients(rng, 1.0);
      r.set_found(1);
      const auto before = bytes_of({&r.param, &dbuf, &r.copy});
      cuda::sgd_update(k.n, r.fp32(), r.param.f32(), dbuf.f32(), s, nullptr, "test", nullptr, r.compute(),
                       r.scaling());
      sync();
      EXPECT_EQ(bytes_of({&r.param, &dbuf, &r.copy}), before) << "a skipped step must leave every region as it was";
    }
}

TEST(OptimizerGpu, AdamWWithAComputePrefixMatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(46);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 1e-2;
  for (DType dtype : {DType::F16, DType::BF16})
    for (const PrefixCase& k : kPrefixCases) {
      SCOPED_TRACE(label(k, dtype));
      std::vector<double> p = random_values(DType::F32, size_t(k.n), rng), m(size_t(k.n), 0.0), v(size_t(k.n), 0.0);
      PrefixRegions r(k, dtype, p);
      DeviceTensor dm(DType::F32, m, k.offset), dv(DType::F32, v, k.offset);
      for (int step = 1; step <= kSteps; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        const cuda::AdamWScalars s = cuda::adamw_scalars(lr, b1, b2, eps, wd, step);
        const std::vector<double> g = r.next_gradients(rng, 0.1);
        cuda::adamw_update(k.n, r.fp32(), r.param.f32(), dm.f32(), dv.f32(), s, nullptr, "test", nullptr,
                           r.compute(), r.scaling());
        sync();
        for (int64_t i = 0; i < k.n; ++i) {
          m[i] = double(s.beta1) * m[i] + double(s.one_minus_beta1) * g[i];
          v[i] = double(s.beta2) * v[i] + double(s.one_minus_beta2) * g[i] * g[i];
          p[i] = p[i] * double(s.keep) -
                 double(s.step_size) * m[i] / (std::sqrt(v[i]) / double(s.bias2_sqrt) + double(s.eps));
        }
        const std::vector<double> got_p = r.param.get();
        expect_close("param", got_p, p, 1e-6);
        expect_close("exp_avg", dm.get(), m, 1e-6);
        expect_close("exp_avg_sq", dv.get(), v, 1e-6);
        r.expect_copy_of(got_p);
      }
      r.next_gradients(rng, 0.1);
      r.set_found(1);
      const auto before = bytes_of({&r.param, &dm, &dv, &r.copy});
      cuda::adamw_update(k.n, r.fp32(), r.param.f32(), dm.f32(), dv.f32(),
                         cuda::adamw_scalars(lr, b1, b2, eps, wd, kSteps + 1), nullptr, "test", nullptr, r.compute(),
                         r.scaling());
      sync();
      EXPECT_EQ(bytes_of({&r.param, &dm, &dv, &r.copy}), before) << "a skipped step must leave every region as it was";
    }
}

// A compiled fp16 program keeps the weights' compute copies equal to the rounded fp32 masters
// without a cast in its step: the refresh list makes them after init_state and after host writes
// of parameters (before a replayed CUDA Graph too), the update after every step, a skipped one
// included.
TEST(OptimizerGpu, ProgramKeepsComputeCopiesEqualToTheRoundedMasters) {
  KILN_REQUIRE_GPU();
  CompileOptions c;
  c.device = Device::CUDA, c.precision = Precision::FP16, c.batch = 64;
  c.optimizer.set("momentum", 0.9);
  Executable exe(compile(zoo::digits_cnn(), c), 3);
  const Program& p = exe.program();
  ASSERT_GE(p.compute_param_region, 0);
  std::mt19937 rng(47);
  const TensorSpec& in = p.tensors[p.input];
  const std::vector<std::byte> images = testing::encode(in.dtype, random_values(DType::F32, size_t(numel(in.shape)), rng));
  exe.write(p.input, images.data(), images.size());
  std::vector<int32_t> labels(size_t(c.batch));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 10);
  exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));

  const size_t prefix = size_t(numel(p.tensors[p.compute_param_region].shape));
  auto copies = [&] {
    std::vector<std::byte> bytes(p.tensors[p.compute_param_region].bytes());
    exe.read(p.compute_param_region, bytes.data(), bytes.size());
    return bytes;
  };
  auto rounded_masters = [&] {
    const std::vector<float> master = exe.read<float>(p.param_region);
    return testing::encode(DType::F16, std::vector<float>(master.begin(), master.begin() + std::ptrdiff_t(prefix)));
  };
  const StepScalars s{0.05f, 0, 1};
  exe.run_inference(s);  // op by op
  EXPECT_EQ(copies(), rounded_masters()) << "after init_state";

  // A host write of one parameter reaches its copy before the next list runs.
  const int weight = exe.id("conv1.conv.weight");
  std::vector<float> w = exe.read<float>(weight);
  for (float& x : w) x = -2 * x;
  exe.write(weight, w.data(), w.size() * sizeof(float));
  const std::vector<std::byte> before_write = copies();
  exe.run_inference(s);  // captured
  EXPECT_NE(copies(), before_write);
  EXPECT_EQ(copies(), rounded_masters()) << "after writing a parameter";

  // A scale the fp16 gradients hold (loss_scale_gpu_test.cpp), so that every step is taken.
  const float modest = 1024.f;
  exe.write(p.loss_scale, &modest, sizeof modest);
  const std::vector<float> initial = exe.read<float>(p.param_region);
  for (int64_t step = 0; step < 3; ++step) {  // op by op, captured, replayed
    exe.run_step({0.05f, step, 1});
    EXPECT_EQ(exe.read<int32_t>(p.found_nonfinite)[0], 0) << "step " << step;
    EXPECT_EQ(copies(), rounded_masters()) << "after step " << step;
  }
  EXPECT_NE(exe.read<float>(p.param_region), initial);

  // Written again after the graphs were captured: the refresh runs before the replay.
  for (float& x : w) x = 0.5f * x;
  exe.write(weight, w.data(), w.size() * sizeof(float));
  exe.run_inference(s);  // replayed
  EXPECT_EQ(copies(), rounded_masters()) << "after writing a parameter, before a replayed graph";

  // A skipped step (2^40 overflows the fp16 backward) leaves masters and copies as they were.
  const float huge = std::ldexp(1.f, 40);
  exe.write(p.loss_scale, &huge, sizeof huge);
  const std::vector<float> masters = exe.read<float>(p.param_region);
  const std::vector<std::byte> kept = copies();
  exe.run_step({0.05f, 3, 1});
  EXPECT_EQ(exe.read<int32_t>(p.found_nonfinite)[0], 1);
  EXPECT_EQ(exe.read<float>(p.param_region), masters);
  EXPECT_EQ(copies(), kept);
}

// Scalars read from device memory (CUDA Graph replay) give bit-identical results.
TEST(OptimizerGpu, DeviceScalarsMatchHostScalars) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(43);
  const int64_t n = 10007;
  const std::vector<double> p = random_values(DType::F32, n, rng),
                            g = random_values(DType::F32, n, rng);
  const std::vector<double> zeros(n, 0.0);

  const cuda::SgdScalars sgd = cuda::sgd_scalars(0.1, 0.9, 1e-4, true);
  DeviceBuffer sgd_dev(sizeof sgd);
  sgd_dev.upload(&sgd, sizeof sgd);
  DeviceTensor grad(DType::F32, g), p1(DType::F32, p), p2(DType::F32, p), b1(DType::F32, zeros),
      b2(DType::F32, zeros);
  cuda::SgdScalars wrong = sgd;
  wrong.lr = 123.f;  // must be ignored in favour of the device copy
  cuda::sgd_update(n, grad.f32(), p1.f32(), b1.f32(), sgd, nullptr, "test");
  cuda::sgd_update(n, grad.f32(), p2.f32(), b2.f32(), wrong, nullptr, "test",
                   sgd_dev.as<cuda::SgdScalars>());
  sync();
  EXPECT_EQ(p1.buf.download(n * 4), p2.buf.download(n * 4)) << "SGD with device scalars";

  const cuda::AdamWScalars adam = cuda::adamw_scalars(1e-3, 0.9, 0.999, 1e-8, 1e-2, 5);
  DeviceBuffer adam_dev(sizeof adam);
  adam_dev.upload(&adam, sizeof adam);
  DeviceTensor q1(DType::F32, p), q2(DType::F32, p), m1(DType::F32, zeros), m2(DType::F32, zeros),
      v1(DType::F32, zeros), v2(DType::F32, zeros);
  cuda::adamw_update(n, grad.f32(), q1.f32(), m1.f32(), v1.f32(), adam, nullptr, "test");
  cuda::adamw_update(n, grad.f32(), q2.f32(), m2.f32(), v2.f32(), cuda::AdamWScalars{}, nullptr,
                     "test", adam_dev.as<cuda::AdamWScalars>());
  sync();
  EXPECT_EQ(q1.buf.download(n * 4), q2.buf.download(n * 4)) << "AdamW with device scalars";
}

TEST(OptimizerGpu, CopyMasterParams) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(44);
  for (DType dt : {DType::F16, DType::BF16, DType::F32})
    for (const Case& k : kCases) {
      SCOPED_TRACE(std::string(name(dt)) + " " + label(k));
      const std::vector<double> master = random_values(DType::F32, k.n, rng);
      DeviceTensor src(DType::F32, master, k.offset), dst(dt, k.n, k.offset);
      dst.poison();
      cuda::copy_master_params(k.n, src.f32(), dt, dst.ptr(), nullptr, "test");
      sync();
      expect_exact_copy(dst, master);
    }
}

TEST(OptimizerGpu, RejectsInconsistentRegions) {
  KILN_REQUIRE_GPU();
  DeviceTensor a(DType::F32, 64), b(DType::F32, 64);
  const cuda::SgdScalars with_momentum = cuda::sgd_scalars(0.1, 0.9, 0, false);
  EXPECT_THROW(cuda::sgd_update(64, a.f32(), b.f32(), nullptr, with_momentum, nullptr, "test"),
               Error);
  EXPECT_THROW(cuda::adamw_update(64, a.f32(), b.f32(), nullptr, b.f32(), cuda::AdamWScalars{},
                                  nullptr, "test"),
               Error);
  // Nothing to update: no launch, no error.
  EXPECT_NO_THROW(cuda::sgd_update(0, nullptr, nullptr, nullptr, cuda::SgdScalars{}, nullptr, "t"));
  sync();
}

// --- LARS ---

// A region as a compiled program lays it out: tensors from multiples of 8 elements with a gap
// after each, optionally one at an odd offset (the narrow path), more tensors than one launch's
// batch, one longer than the most blocks a tensor gets, a tensor with zero gradients and one with
// zero weights (trust ratio 1), and 1-D tensors that take plain steps.
struct LarsLayout {
  std::vector<LarsSegment> segments;
  int64_t n = 0;
  size_t zero_grad = 0, zero_weight = 0;
  size_t add(int64_t length, bool plain, int64_t misalign = 0) {
    segments.push_back({n + misalign, length, plain});
    n += (misalign + length + 7) / 8 * 8 + 8;  // n stays a multiple of 8: a prefix may end here
    return segments.size() - 1;
  }
};

LarsLayout lars_layout(bool odd_offset) {
  LarsLayout l;
  l.add(64 * 32 * 3 * 3, false);
  l.add(64, true);
  l.add(64, true);
  l.add(1000, false, odd_offset ? 3 : 0);
  l.zero_grad = l.add(300, false);
  l.zero_weight = l.add(77, false);
  for (int i = 0; i < 330; ++i) l.add(1 + 37 * i % 301, i % 3 == 0);
  l.add(2500003, false);  // past 256 blocks of 8192: each block loops
  l.add(10, true);
  return l;
}

// `inside` in every tensor (zeros in tensor `zero`), `gap` elsewhere.
std::vector<double> lars_values(const LarsLayout& l, const std::vector<double>& inside, size_t zero, double gap) {
  std::vector<double> v(size_t(l.n), gap);
  for (size_t s = 0; s < l.segments.size(); ++s)
    for (int64_t i = l.segments[s].offset; i < l.segments[s].offset + l.segments[s].length; ++i)
      v[size_t(i)] = s == zero ? 0.0 : inside[size_t(i)];
  return v;
}

// Every element of `got` outside the tensors must still be `was`'s, bit for bit.
void expect_gaps_kept(const LarsLayout& l, const std::vector<double>& got, const std::vector<double>& was,
                      const char* what) {
  std::vector<bool> inside(size_t(l.n), false);
  for (const LarsSegment& s : l.segments)
    for (int64_t i = s.offset; i < s.offset + s.length; ++i) inside[size_t(i)] = true;
  size_t changed = 0;
  for (size_t i = 0; i < got.size(); ++i)
    changed += !inside[i] && !(got[i] == was[i] || (std::isnan(got[i]) && std::isnan(was[i])));
  EXPECT_EQ(changed, 0u) << what << ": the update wrote elements in no tensor";
}

testing::LarsReference lars_reference(const cuda::LarsScalars& s) {  // the fp32 scalars the kernel sees
  return {double(s.lr), double(s.momentum), double(s.weight_decay), double(s.trust_coefficient)};
}

TEST(OptimizerGpu, LarsMatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(51);
  for (size_t offset : {size_t(0), size_t(1)})
    for (bool odd : {false, true}) {
      SCOPED_TRACE("offset " + std::to_string(offset) + (odd ? " odd tensor" : ""));
      const LarsLayout l = lars_layout(odd);
      ASSERT_GT(l.segments.size(), size_t(cuda::lars_batch_tensors()));
      const cuda::LarsScalars s = cuda::lars_scalars(2.0, 0.9, 5e-4, 0.001);
      const testing::LarsReference ref = lars_reference(s);
      std::vector<double> p = lars_values(l, random_values(DType::F32, size_t(l.n), rng), l.zero_weight, 7.0);
      std::vector<double> v(size_t(l.n), 0.0);
      DeviceTensor dp(DType::F32, p, offset), dv(DType::F32, v, offset), grad(DType::F32, size_t(l.n), offset);
      DeviceBuffer workspace(cuda::lars_workspace_bytes(l.segments.size()));
      for (int step = 0; step < kSteps; ++step) {
        SCOPED_TRACE("step " + std::to_string(step + 1));
        const std::vector<double> g =
            lars_values(l, random_values(DType::F32, size_t(l.n), rng, 0.0, 0.01), l.zero_grad, 3.0);
        grad.set(g);
        cuda::lars_update(l.segments, l.n, grad.f32(), dp.f32(), dv.f32(), s, workspace.get(), workspace.bytes(),
                          nullptr, "test");
        sync();
        const std::vector<double> before = p;
        ref.step(l.segments, p, v, g);
        const std::vector<double> got_p = dp.get(), got_v = dv.get();
        expect_close("param", got_p, p, 1e-6);
        expect_close("momentum buffer", got_v, v, 1e-6);
        EXPECT_LT(testing::lars_err(got_p, p), 1e-5);
        expect_gaps_kept(l, got_p, before, "param");
        expect_gaps_kept(l, got_v, std::vector<double>(size_t(l.n), 0.0), "momentum buffer");
        p = got_p, v = got_v;  // the next step starts where the kernel's ended
      }
    }
}

// The norms are fixed-order sums: the same update twice gives the same bytes, and reading lr on
// the device (a replayed CUDA Graph) gives the bytes of the host's lr.
TEST(OptimizerGpu, LarsRepeatsBitForBitWithDeviceLr) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(52);
  const LarsLayout l = lars_layout(false);
  const std::vector<double> p = random_values(DType::F32, size_t(l.n), rng),
                            g = random_values(DType::F32, size_t(l.n), rng, 0.0, 0.01);
  const cuda::LarsScalars s = cuda::lars_scalars(1.0, 0.9, 1e-4, 0.002);
  cuda::LarsScalars wrong = s;
  wrong.lr = 123.f;  // must be ignored in favour of the device copy
  DeviceBuffer lr(sizeof(float)), workspace(cuda::lars_workspace_bytes(l.segments.size()));
  lr.upload(&s.lr, sizeof(float));
  DeviceTensor grad(DType::F32, g);
  std::vector<std::vector<uint8_t>> results;
  for (int run = 0; run < 3; ++run) {
    DeviceTensor dp(DType::F32, p), dv(DType::F32, size_t(l.n));
    dv.set(std::vector<double>(size_t(l.n), 0.0));
    for (int step = 0; step < 2; ++step)
      cuda::lars_update(l.segments, l.n, grad.f32(), dp.f32(), dv.f32(), run == 2 ? wrong : s, workspace.get(),
                        workspace.bytes(), nullptr, "test", run == 2 ? lr.as<float>() : nullptr);
    sync();
    results.push_back(dp.buf.download(size_t(l.n) * 4));
  }
  EXPECT_EQ(results[0], results[1]) << "the same update twice";
  EXPECT_EQ(results[0], results[2]) << "lr read on the device";
}

// Mixed precision: the first tensors have fp16/bf16 gradients and copies, under loss scaling;
// a flagged step changes nothing.
TEST(OptimizerGpu, LarsWithAComputePrefixMatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(53);
  const LarsLayout l = lars_layout(false);
  const int64_t prefix = l.segments[50].offset;  // a multiple of 8, between two tensors
  const cuda::LarsScalars s = cuda::lars_scalars(2.0, 0.9, 5e-4, 0.001);
  const testing::LarsReference ref = lars_reference(s);
  for (DType dtype : {DType::F16, DType::BF16})
    for (size_t offset : {size_t(0), size_t(1)}) {
      const PrefixCase k{prefix, l.n, offset};
      SCOPED_TRACE(label(k, dtype));
      std::vector<double> p = random_values(DType::F32, size_t(l.n), rng), v(size_t(l.n), 0.0);
      PrefixRegions r(k, dtype, p);
      DeviceTensor dv(DType::F32, v, offset);
      DeviceBuffer workspace(cuda::lars_workspace_bytes(l.segments.size()));
      for (int step = 0; step < kSteps; ++step) {
        SCOPED_TRACE("step " + std::to_string(step + 1));
        const std::vector<double> g = r.next_gradients(rng, 0.01);
        cuda::lars_update(l.segments, l.n, r.fp32(), r.param.f32(), dv.f32(), s, workspace.get(), workspace.bytes(),
                          nullptr, "test", nullptr, r.compute(), r.scaling());
        sync();
        const std::vector<double> before = p;
        ref.step(l.segments, p, v, g);
        const std::vector<double> got_p = r.param.get(), got_v = dv.get();
        expect_close("param", got_p, p, 1e-6);
        expect_close("momentum buffer", got_v, v, 1e-6);
        expect_gaps_kept(l, got_p, before, "param");
        // The copy: each tensor of the prefix exactly its rounded parameters; the gaps and
        // everything past the prefix never written (still poisoned).
        const std::vector<double> copy = r.copy.get();
        std::vector<double> want_copy(size_t(l.n), std::nan(""));
        for (const LarsSegment& seg : l.segments)
          for (int64_t i = seg.offset; i < seg.offset + seg.length && i < prefix; ++i)
            want_copy[size_t(i)] = round_to(dtype, got_p[size_t(i)]);
        size_t wrong = 0;
        for (size_t i = 0; i < copy.size(); ++i)
          wrong += !(copy[i] == want_copy[i] || (std::isnan(copy[i]) && std::isnan(want_copy[i])));
        EXPECT_EQ(wrong, 0u) << name(dtype) << " copy";
        p = got_p, v = got_v;
      }
      r.next_gradients(rng, 0.01);
      r.set_found(1);
      const auto before = bytes_of({&r.param, &dv, &r.copy});
      cuda::lars_update(l.segments, l.n, r.fp32(), r.param.f32(), dv.f32(), s, workspace.get(), workspace.bytes(),
                        nullptr, "test", nullptr, r.compute(), r.scaling());
      sync();
      EXPECT_EQ(bytes_of({&r.param, &dv, &r.copy}), before) << "a skipped step must leave every region as it was";
    }
}

// A compiled fp32 program trained with LARS: op by op, each step follows the rule (from the
// parameters it starts with and the gradients its backward wrote), and run_step's captured and
// replayed steps give the op-by-op bytes.
TEST(OptimizerGpu, LarsProgramFollowsTheRuleAndReplaysBitForBit) {
  KILN_REQUIRE_GPU();
  CompileOptions c;
  c.device = Device::CUDA, c.precision = Precision::FP32, c.batch = 32;
  c.optimizer.name = "lars";
  c.optimizer.set("momentum", 0.9).set("weight_decay", 5e-4).set("trust_coefficient", 0.002);
  c.cuda.tune = false;  // both programs take the same (first) plans
  Executable by_op(compile(zoo::digits_cnn(), c), 3), replayed(compile(zoo::digits_cnn(), c), 3);
  const Program& p = by_op.program();
  const testing::LarsReference ref{2.0, double(0.9f), double(5e-4f), double(0.002f)};
  std::vector<std::vector<double>> momentum;
  for (int id : p.params) momentum.emplace_back(size_t(numel(p.tensors[size_t(id)].shape)), 0.0);
  std::mt19937 rng(54);
  for (int64_t step = 0; step < 4; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const TensorSpec& in = p.tensors[size_t(p.input)];
    const std::vector<std::byte> images =
        testing::encode(in.dtype, random_values(DType::F32, size_t(numel(in.shape)), rng));
    std::vector<int32_t> labels(size_t(c.batch));
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t((i + size_t(step)) % 10);
    for (Executable* exe : {&by_op, &replayed}) {
      exe->write(p.input, images.data(), images.size());
      exe->write(p.label, labels.data(), labels.size() * sizeof(int32_t));
    }
    const StepScalars s{2.0f, step, 1};
    by_op.run_forward(s);
    by_op.run_backward(s);
    std::vector<std::vector<double>> want;
    for (size_t i = 0; i < p.params.size(); ++i) {
      const TensorSpec& t = p.tensors[size_t(p.params[i])];
      const std::vector<float> w32 = by_op.read<float>(p.params[i]);
      std::vector<double> w(w32.begin(), w32.end());
      const std::vector<double> g = by_op.gradient(t.name);
      ref.step(w.data(), momentum[i].data(), g.data(), int64_t(w.size()), t.shape.size() == 1);
      want.push_back(std::move(w));
    }
    by_op.run_update(s);
    for (size_t i = 0; i < p.params.size(); ++i)
      expect_close(p.tensors[size_t(p.params[i])].name, by_op.read<float>(p.params[i]), want[i], 1e-6);
    replayed.run_step(s);  // op by op, then captured, then replayed
    EXPECT_EQ(replayed.read<float>(p.param_region), by_op.read<float>(p.param_region));
  }
}

// fp16: the compute copies stay the rounded masters through LARS steps, and a step whose
// gradients overflow is skipped whole.
TEST(OptimizerGpu, LarsProgramInFp16KeepsCopiesAndSkipsOverflow) {
  KILN_REQUIRE_GPU();
  CompileOptions c;
  c.device = Device::CUDA, c.precision = Precision::FP16, c.batch = 64;
  c.optimizer.name = "lars";
  c.optimizer.set("weight_decay", 5e-4);
  expect_fp16_program_keeps_copies_and_skips_overflow(c, OpKind::LARS_UPDATE, 1.0f, 55);
}

}  // namespace
}  // namespace kiln

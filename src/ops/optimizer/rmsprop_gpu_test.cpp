// The fused RMSprop update on the GPU against RMSprop in double (rmsprop_reference_test.h, with
// the fp32 scalars the kernel receives), over several steps of each case's settings: with a half
// copy written beside the masters, misaligned regions, lr read on the device, and in mixed
// precision with a prefix of fp16/bf16 gradients and copies under loss scaling, a flagged step
// included. Then compiled programs: fp32 steps follow the reference on the gradients the
// program's backward wrote, and replayed CUDA Graph steps give the op-by-op bytes; fp16 keeps the
// copies equal to the rounded masters and skips a step whose gradients overflow.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/zoo.h"
#include "ops/optimizer/fp16_program_gpu_test.h"
#include "ops/optimizer/rmsprop_cuda.h"
#include "ops/optimizer/rmsprop_reference_test.h"
#include "ops/optimizer/update_regions_gpu_test.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace gpu_test;
using namespace update_test;
using testing::RmspropCase;

constexpr double kLr = 0.01;
constexpr int kSteps = 3;

cuda::RmspropScalars scalars_of(const RmspropCase& c) {
  return cuda::rmsprop_scalars(kLr, c.alpha, c.eps, c.weight_decay, c.momentum);
}

// The reference's 1 - alpha is the kernel's one_minus_alpha only up to rounding: the kernel's is
// 1 - alpha rounded to fp32, which the reference must use too.
void step_reference(const cuda::RmspropScalars& s, bool centered, std::vector<double>& w, std::vector<double>& v,
                    std::vector<double>& b, std::vector<double>& a, const std::vector<double>& g) {
  const double keep = s.alpha, take = s.one_minus_alpha;
  for (size_t i = 0; i < w.size(); ++i) {
    const double gi = g[i] + double(s.weight_decay) * w[i];
    v[i] = keep * v[i] + take * gi * gi;
    double d;
    if (centered) {
      a[i] = keep * a[i] + take * gi;
      d = std::sqrt(v[i] - a[i] * a[i]) + double(s.eps);
    } else {
      d = std::sqrt(v[i]) + double(s.eps);
    }
    if (s.momentum != 0.f) {
      b[i] = double(s.momentum) * b[i] + gi / d;
      w[i] -= double(s.lr) * b[i];
    } else {
      w[i] -= double(s.lr) * gi / d;
    }
  }
}

struct Case {
  int64_t n;
  size_t offset = 0;  // floats; 1 misaligns every region
};
const std::vector<Case> kCases = {{1}, {13}, {1000}, {100003}, {1000, 1}, {100003, 1}};

TEST(RmspropGpu, MatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(71);
  for (const RmspropCase& c : testing::rmsprop_cases())
    for (const Case& k : kCases) {
      SCOPED_TRACE(std::string(c.name) + " n=" + std::to_string(k.n) + " offset=" + std::to_string(k.offset));
      const cuda::RmspropScalars s = scalars_of(c);
      std::vector<double> p = random_values(DType::F32, size_t(k.n), rng), v(size_t(k.n), 0.0), b = v, a = v;
      DeviceTensor dp(DType::F32, p, k.offset), dv(DType::F32, v, k.offset), db(DType::F32, b, k.offset),
          da(DType::F32, a, k.offset), grad(DType::F32, size_t(k.n), k.offset), copy(DType::F16, size_t(k.n), k.offset);
      for (int step = 1; step <= kSteps; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        const std::vector<double> g = random_values(DType::F32, size_t(k.n), rng, 0.0, 0.1);
        grad.set(g);
        copy.poison();
        cuda::rmsprop_update(k.n, grad.f32(), dp.f32(), dv.f32(), c.momentum != 0 ? db.f32() : nullptr,
                             c.centered ? da.f32() : nullptr, s, nullptr, "test", nullptr,
                             cuda::ComputeCopies{k.n, DType::F16, nullptr, copy.ptr()});
        sync();
        step_reference(s, c.centered, p, v, b, a, g);
        const std::vector<double> got_p = dp.get();
        expect_close("param", got_p, p, 1e-6);
        expect_close("square_avg", dv.get(), v, 1e-6);
        if (c.momentum != 0) {
          expect_close("momentum buffer", db.get(), b, 1e-6);
        }
        if (c.centered) {
          expect_close("grad_avg", da.get(), a, 1e-6);
        }
        expect_exact_copy(copy, got_p);
      }
    }
}

TEST(RmspropGpu, WithAComputePrefixMatchesReferenceAndAFlaggedStepChangesNothing) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(72);
  const RmspropCase& c = testing::rmsprop_cases()[3];  // centered, momentum, weight decay
  const cuda::RmspropScalars s = scalars_of(c);
  for (DType dtype : {DType::F16, DType::BF16})
    for (const PrefixCase& k : kPrefixCases) {
      SCOPED_TRACE(label(k, dtype));
      std::vector<double> p = random_values(DType::F32, size_t(k.n), rng), v(size_t(k.n), 0.0), b = v, a = v;
      PrefixRegions r(k, dtype, p);
      DeviceTensor dv(DType::F32, v, k.offset), db(DType::F32, b, k.offset), da(DType::F32, a, k.offset);
      for (int step = 0; step < kSteps; ++step) {
        SCOPED_TRACE("step " + std::to_string(step + 1));
        const std::vector<double> g = r.next_gradients(rng, 0.1);
        cuda::rmsprop_update(k.n, r.fp32(), r.param.f32(), dv.f32(), db.f32(), da.f32(), s, nullptr, "test", nullptr,
                             r.compute(), r.scaling());
        sync();
        step_reference(s, true, p, v, b, a, g);
        const std::vector<double> got_p = r.param.get();
        expect_close("param", got_p, p, 1e-6);
        expect_close("square_avg", dv.get(), v, 1e-6);
        expect_close("momentum buffer", db.get(), b, 1e-6);
        expect_close("grad_avg", da.get(), a, 1e-6);
        r.expect_copy_of(got_p);
      }
      r.next_gradients(rng, 0.1);
      r.set_found(1);
      const auto before = bytes_of({&r.param, &dv, &db, &da, &r.copy});
      cuda::rmsprop_update(k.n, r.fp32(), r.param.f32(), dv.f32(), db.f32(), da.f32(), s, nullptr, "test", nullptr,
                           r.compute(), r.scaling());
      sync();
      EXPECT_EQ(bytes_of({&r.param, &dv, &db, &da, &r.copy}), before)
          << "a skipped step must leave every region as it was";
    }
}

// The learning rate read from device memory (a replayed CUDA Graph's step scalars) gives the
// bytes of the host's.
TEST(RmspropGpu, DeviceLrMatchesHostLr) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(73);
  const int64_t n = 10007;
  const std::vector<double> p = random_values(DType::F32, size_t(n), rng);
  const std::vector<double> g = random_values(DType::F32, size_t(n), rng);
  const std::vector<double> zeros(size_t(n), 0.0);
  const cuda::RmspropScalars s = scalars_of(testing::rmsprop_cases()[3]);
  cuda::RmspropScalars wrong = s;
  wrong.lr = 123.f;  // must be ignored in favour of the device's
  DeviceBuffer lr(sizeof(float));
  lr.upload(&s.lr, sizeof s.lr);
  DeviceTensor grad(DType::F32, g), p1(DType::F32, p), p2(DType::F32, p), v1(DType::F32, zeros),
      v2(DType::F32, zeros), b1(DType::F32, zeros), b2(DType::F32, zeros), a1(DType::F32, zeros), a2(DType::F32, zeros);
  cuda::rmsprop_update(n, grad.f32(), p1.f32(), v1.f32(), b1.f32(), a1.f32(), s, nullptr, "test");
  cuda::rmsprop_update(n, grad.f32(), p2.f32(), v2.f32(), b2.f32(), a2.f32(), wrong, nullptr, "test", lr.as<float>());
  sync();
  EXPECT_EQ(p1.buf.download(size_t(n) * 4), p2.buf.download(size_t(n) * 4));
}

TEST(RmspropGpu, RejectsInconsistentRegions) {
  KILN_REQUIRE_GPU();
  DeviceTensor a(DType::F32, 64), b(DType::F32, 64), v(DType::F32, 64);
  const cuda::RmspropScalars with_momentum = cuda::rmsprop_scalars(0.1, 0.99, 1e-8, 0, 0.9);
  EXPECT_THROW(cuda::rmsprop_update(64, a.f32(), b.f32(), v.f32(), nullptr, nullptr, with_momentum, nullptr, "test"),
               Error);
  EXPECT_THROW(cuda::rmsprop_update(64, a.f32(), b.f32(), nullptr, nullptr, nullptr, cuda::RmspropScalars{}, nullptr,
                                    "test"),
               Error);
  sync();
}

CompileOptions program_options(Precision precision, int batch) {
  const RmspropCase& c = testing::rmsprop_cases()[3];
  CompileOptions o;
  o.device = Device::CUDA, o.precision = precision, o.batch = batch;
  o.optimizer = {"rmsprop"};
  o.optimizer.set("alpha", c.alpha).set("eps", c.eps).set("weight_decay", c.weight_decay);
  o.optimizer.set("momentum", c.momentum).set("centered", c.centered);
  o.cuda.tune = false;  // both programs take the same (first) plans
  return o;
}

// A compiled fp32 program trained with RMSprop: op by op, each step follows the reference (from
// the parameters it starts with and the gradients its backward wrote), and run_step's captured
// and replayed steps give the op-by-op bytes.
TEST(RmspropGpu, ProgramFollowsTheRuleAndReplaysBitForBit) {
  KILN_REQUIRE_GPU();
  const CompileOptions c = program_options(Precision::FP32, 32);
  Executable by_op(compile(zoo::digits_cnn(), c), 3), replayed(compile(zoo::digits_cnn(), c), 3);
  const Program& p = by_op.program();
  ASSERT_EQ(p.update.size(), 1u);
  ASSERT_EQ(p.update[0].kind, OpKind::RMSPROP_UPDATE);
  const testing::RmspropReference ref = testing::rmsprop_reference(testing::rmsprop_cases()[3], float(kLr));
  struct State {
    std::vector<double> v, b, a;
  };
  std::vector<State> state;
  for (int id : p.params) {
    const std::vector<double> zeros(size_t(numel(p.tensors[size_t(id)].shape)), 0.0);
    state.push_back({zeros, zeros, zeros});
  }
  std::mt19937 rng(74);
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
    const StepScalars s{float(kLr) * float(step + 1), step, 1};  // lr changes: the replay must follow
    by_op.run_forward(s);
    by_op.run_backward(s);
    testing::RmspropReference at = ref;
    at.lr = s.lr;
    std::vector<std::vector<double>> want;
    for (size_t i = 0; i < p.params.size(); ++i) {
      const std::vector<float> w32 = by_op.read<float>(p.params[i]);
      std::vector<double> w(w32.begin(), w32.end());
      const std::vector<double> g = by_op.gradient(p.tensors[size_t(p.params[i])].name);
      at.step(w.data(), state[i].v.data(), state[i].b.data(), state[i].a.data(), g.data(), int64_t(w.size()));
      want.push_back(std::move(w));
    }
    by_op.run_update(s);
    for (size_t i = 0; i < p.params.size(); ++i)
      expect_close(p.tensors[size_t(p.params[i])].name, by_op.read<float>(p.params[i]), want[i], 1e-5);
    replayed.run_step(s);  // op by op, then captured, then replayed
    EXPECT_EQ(replayed.read<float>(p.param_region), by_op.read<float>(p.param_region));
  }
}

// fp16: the compute copies stay the rounded masters through RMSprop steps, and a step whose
// gradients overflow is skipped whole, its state included.
// RMSprop's first steps move each parameter by about lr / sqrt(1 - alpha) = 10 lr (the square
// average starts at 0): at kLr the fp16 activations overflowed at loss scale 1024 by the third step
// (H100, 8613589), a skip the test would take for the overflow it provokes itself. lr 1e-4 moves
// each parameter by about 1e-3 a step, which the masters still show.
TEST(RmspropGpu, ProgramInFp16KeepsCopiesAndSkipsOverflow) {
  KILN_REQUIRE_GPU();
  expect_fp16_program_keeps_copies_and_skips_overflow(program_options(Precision::FP16, 64), OpKind::RMSPROP_UPDATE,
                                                      1e-4f, 75);
}

}  // namespace
}  // namespace kiln

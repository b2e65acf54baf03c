// Fused GPU optimizer updates against double-precision references of the PyTorch formulas
// (computed with the same fp32-rounded step scalars the kernels receive), over several steps,
// with the optional half copy, device-side scalars and misaligned regions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "support/gpu_test_util.h"
#include "ops/optimizer/optimizer_cuda.h"

namespace kiln {
namespace {

using namespace gpu_test;

struct Case {
  int64_t n;
  size_t offset = 0;  // floats; 1 misaligns every region
};
const std::vector<Case> kCases = {{1}, {13}, {1000}, {100003}, {1000, 1}, {100003, 1}};
constexpr int kSteps = 3;

std::string label(const Case& k) {
  return "n=" + std::to_string(k.n) + " offset=" + std::to_string(k.offset);
}

// Every element of `copy` must be exactly `param` rounded to the copy's dtype.
void expect_exact_copy(const DeviceTensor& copy, const std::vector<double>& param) {
  const std::vector<double> got = copy.get();
  size_t bad = 0;
  for (size_t i = 0; i < param.size(); ++i) bad += got[i] != round_to(copy.dtype, param[i]);
  EXPECT_EQ(bad, 0u) << name(copy.dtype) << " parameter copy differs from the rounded update";
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
                         "test", nullptr, cuda::ParamCopy{copy.ptr(), DType::F16});
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
                           nullptr, cuda::ParamCopy{copy.ptr(), copy_dtype});
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

}  // namespace
}  // namespace kiln

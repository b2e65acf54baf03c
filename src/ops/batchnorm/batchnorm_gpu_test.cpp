// GPU batchnorm kernels against plain double-precision references on the same (rounded)
// inputs, for fp32 / fp16 / bf16 activations and shapes that hit every code path: c = 3 and
// 100 (narrow packs, flat bit-mask fallback), 8 / 64 / 256 (16-byte packs), 2600 (several
// channel slices), and misaligned pointers.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "ops/batchnorm/batchnorm_cuda.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace gpu_test;


const std::vector<TileCase> kCases = {{5, 3},       {1000, 8},     {4099, 64},    {20001, 100},
                                  {2500, 256},  {100003, 64},  {100000, 3},   {301, 2600},
                                  {1000, 8, 1}, {4099, 64, 1}, {2500, 256, 1}};
const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};


// Per-channel mean and 1 / sqrt(biased var + eps) of x, rounded to fp32 like saved statistics.
TEST(BatchNormGpu, ChannelSumsMatchDoubleReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(11);
  for (DType dt : kDtypes)
    for (const TileCase& k : kCases) {
      SCOPED_TRACE(label(dt, k));
      const std::vector<double> xv = random_values(dt, k.m * k.c, rng, 0.7, 1.3);
      DeviceTensor x(dt, xv, k.offset), sum(DType::F32, k.c), sq(DType::F32, k.c);
      const size_t ws_bytes = cuda::channel_sums_workspace_bytes(k.m, k.c);
      DeviceBuffer ws(ws_bytes);
      ws.poison(), sum.poison(), sq.poison();
      cuda::channel_sums(dt, x.ptr(), k.m, k.c, sum.f32(), sq.f32(), ws.get(), ws_bytes, nullptr,
                         "test");
      sync();
      std::vector<double> rs(k.c, 0.0), rq(k.c, 0.0);
      for (int64_t i = 0; i < k.m * k.c; ++i) rs[i % k.c] += xv[i], rq[i % k.c] += xv[i] * xv[i];
      expect_close("sum", sum.get(), rs, 1e-5);
      expect_close("sqsum", sq.get(), rq, 1e-5);

      // Deterministic: a second run gives the same bits.
      const std::vector<uint8_t> first = sum.buf.download(k.c * 4);
      cuda::channel_sums(dt, x.ptr(), k.m, k.c, sum.f32(), sq.f32(), ws.get(), ws_bytes, nullptr,
                         "test");
      sync();
      EXPECT_EQ(sum.buf.download(k.c * 4), first) << "channel_sums is not deterministic";
    }
}

TEST(BatchNormGpu, ChannelSumsRejectsSmallWorkspace) {
  KILN_REQUIRE_GPU();
  const int64_t m = 4096, c = 64;
  DeviceTensor x(DType::F32, std::vector<double>(m * c, 1.0)), sum(DType::F32, c),
      sq(DType::F32, c);
  DeviceBuffer ws(cuda::channel_sums_workspace_bytes(m, c));
  // 16 bytes cannot hold even one row block's partials (2 x 64 floats).
  EXPECT_THROW(cuda::channel_sums(DType::F32, x.ptr(), m, c, sum.f32(), sq.f32(), ws.get(), 16,
                                  nullptr, "layer 'bn1'"),
               Error);
}

TEST(BatchNormGpu, FinalizeMatchesPyTorchSemantics) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(12);
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> uniform(0.1, 4.0);
  const double eps = 1e-5, momentum = 0.1;
  for (int64_t c : {3, 64, 100})
    for (int64_t count : {1, 2, 12544})
      for (bool running : {true, false}) {
        SCOPED_TRACE("c=" + std::to_string(c) + " count=" + std::to_string(count) +
                     (running ? " with running stats" : " without running stats"));
        std::vector<double> sum(c), sq(c), gamma(c), beta(c), rm(c), rv(c);
        for (int64_t ch = 0; ch < c; ++ch) {
          const double mean = 0.3 + normal(rng), var = uniform(rng);
          sum[ch] = static_cast<float>(count * mean);
          sq[ch] = static_cast<float>(count * (var + mean * mean));
          gamma[ch] = static_cast<float>(1 + 0.3 * normal(rng));
          beta[ch] = static_cast<float>(0.5 * normal(rng));
          rm[ch] = static_cast<float>(normal(rng));
          rv[ch] = static_cast<float>(0.5 + uniform(rng));
        }
        DeviceTensor dsum(DType::F32, sum), dsq(DType::F32, sq), dg(DType::F32, gamma),
            db(DType::F32, beta), drm(DType::F32, rm), drv(DType::F32, rv), mean(DType::F32, c),
            inv(DType::F32, c), scale(DType::F32, c), shift(DType::F32, c);
        mean.poison(), inv.poison(), scale.poison(), shift.poison();
        cuda::bn_finalize(dsum.f32(), dsq.f32(), count, dg.f32(), db.f32(), eps, momentum,
                          running ? drm.f32() : nullptr, running ? drv.f32() : nullptr, mean.f32(),
                          inv.f32(), scale.f32(), shift.f32(), c, nullptr, "test");
        sync();
        std::vector<double> r_mean(c), r_inv(c), r_scale(c), r_shift(c), r_rm(c), r_rv(c);
        for (int64_t ch = 0; ch < c; ++ch) {
          const double mu = sum[ch] / count;
          const double var = std::max(sq[ch] / count - mu * mu, 0.0);
          const double unbiased = count > 1 ? var * count / (count - 1) : var;
          r_mean[ch] = mu;
          r_inv[ch] = 1 / std::sqrt(var + eps);
          r_scale[ch] = gamma[ch] * r_inv[ch];
          r_shift[ch] = beta[ch] - mu * r_scale[ch];
          r_rm[ch] = (1 - momentum) * rm[ch] + momentum * mu;
          r_rv[ch] = (1 - momentum) * rv[ch] + momentum * unbiased;
        }
        expect_close("saved_mean", mean.get(), r_mean, 1e-6);
        expect_close("saved_inv_std", inv.get(), r_inv, 1e-6);
        expect_close("scale", scale.get(), r_scale, 1e-6);
        expect_close("shift", shift.get(), r_shift, 1e-6);
        if (running) {
          expect_close("running_mean", drm.get(), r_rm, 1e-6);
          expect_close("running_var (unbiased update)", drv.get(), r_rv, 1e-6);
        } else {
          EXPECT_EQ(drm.get(), rm) << "running_mean changed although it was not passed";
        }
      }
}

TEST(BatchNormGpu, InferenceScaleShift) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(13);
  const int64_t c = 100;
  const std::vector<double> gamma = random_values(DType::F32, c, rng, 1.0, 0.3),
                            beta = random_values(DType::F32, c, rng),
                            rm = random_values(DType::F32, c, rng);
  std::vector<double> rv = random_values(DType::F32, c, rng);
  for (double& v : rv) v = static_cast<float>(0.2 + v * v);
  DeviceTensor dg(DType::F32, gamma), db(DType::F32, beta), drm(DType::F32, rm),
      drv(DType::F32, rv), scale(DType::F32, c), shift(DType::F32, c);
  scale.poison(), shift.poison();
  cuda::bn_inference_scale_shift(dg.f32(), db.f32(), drm.f32(), drv.f32(), 1e-3, c, scale.f32(),
                                 shift.f32(), nullptr, "test");
  sync();
  std::vector<double> rs(c), rsh(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    rs[ch] = gamma[ch] / std::sqrt(rv[ch] + 1e-3);
    rsh[ch] = beta[ch] - rm[ch] * rs[ch];
  }
  expect_close("scale", scale.get(), rs, 1e-6);
  expect_close("shift", shift.get(), rsh, 1e-6);
}

// Which outputs bn_apply is asked for.
struct ApplyMode {
  const char* name;
  bool relu, bits, bytes;
};
const ApplyMode kApplyModes[] = {{"affine", false, false, false},
                                 {"relu", true, false, false},
                                 {"relu+bitmask", true, true, false},
                                 {"relu+bytemask", true, false, true},
                                 {"relu+both masks", true, true, true}};

TEST(BatchNormGpu, ApplyWithReluAndMasks) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(14);
  for (DType dt : kDtypes)
    for (const TileCase& k : kCases)
      for (const ApplyMode& mode : kApplyModes) {
        const int64_t n = k.m * k.c;
        // Large shapes only in the mode that writes everything (keeps the host reference fast).
        if (n > 1'000'000 && !(mode.bits && mode.bytes)) continue;
        SCOPED_TRACE(label(dt, k) + " " + mode.name);
        const std::vector<double> xv = random_values(dt, n, rng, 0.2, 1.5);
        const std::vector<double> sc = random_values(DType::F32, k.c, rng, 0.8, 0.5),
                                  sh = random_values(DType::F32, k.c, rng, 0.0, 0.5);
        const auto [pre, slack, want] = apply_reference(xv, sc, sh, k.c, mode.relu);
        DeviceTensor x(dt, xv, k.offset), y(dt, n, k.offset), dsc(DType::F32, sc),
            dsh(DType::F32, sh);
        DeviceBytes bits(cuda::bitmask_bytes(n)), bytes(n, k.offset);
        for (uint8_t poison : {0xFF, 0x00}) {  // two poisons: a missed mask byte cannot hide
          y.poison(), bits.poison(poison), bytes.poison(poison);
          cuda::bn_apply(dt, x.ptr(), dsc.f32(), dsh.f32(), k.m, k.c, mode.relu, y.ptr(),
                         mode.bits ? bits.ptr() : nullptr, mode.bytes ? bytes.ptr() : nullptr,
                         nullptr, "test");
          sync();
          expect_close("y", y.get(), want, tolerance(dt));
          if (mode.bits) expect_mask_equal("bit mask", bits.get(), pre, slack);
          if (mode.bytes) expect_bytemask_equal("byte mask", bytes.get(), pre, slack);
        }
        // In place: y aliases x.
        if (mode.bits) {
          DeviceTensor xy(dt, xv, k.offset);
          cuda::bn_apply(dt, xy.ptr(), dsc.f32(), dsh.f32(), k.m, k.c, true, xy.ptr(), bits.ptr(),
                         nullptr, nullptr, "test");
          sync();
          expect_close("y in place", xy.get(), want, tolerance(dt));
        }
      }
}

TEST(BatchNormGpu, BackwardReduceAndApplyMatchDoubleReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(15);
  for (DType dt : kDtypes)
    for (const TileCase& k : kCases)
      for (bool masked : {false, true}) {
        SCOPED_TRACE(label(dt, k) + (masked ? " with bit mask" : " without mask"));
        const int64_t m = k.m, c = k.c, n = m * c;
        const std::vector<double> dyv = random_values(dt, n, rng, 0.1, 1.0),
                                  xv = random_values(dt, n, rng, 0.7, 1.3),
                                  gamma = random_values(DType::F32, c, rng, 1.0, 0.3);
        const std::vector<uint8_t> maskv = random_bytes(cuda::bitmask_bytes(n), rng);
        std::vector<double> mean, inv;
        reference_stats(xv, m, c, mean, inv);

        const BnBackwardReference ref =
            bn_backward_reference(dyv, masked ? &maskv : nullptr, xv, gamma, mean, inv, m, c);
        const std::vector<double>&r_sdy = ref.sum_dy, &r_sdyx = ref.sum_dy_xhat, &r_dx = ref.dx;
        const std::vector<double> sdy32 = rounded(DType::F32, r_sdy), sdyx32 = rounded(DType::F32, r_sdyx);

        DeviceTensor dy(dt, dyv, k.offset), x(dt, xv, k.offset), dx(dt, n, k.offset),
            dgamma(DType::F32, gamma), dmean(DType::F32, mean), dinv(DType::F32, inv),
            sdy(DType::F32, c), sdyx(DType::F32, c);
        DeviceBytes mask(maskv);
        const size_t ws_bytes = cuda::bn_backward_reduce_workspace_bytes(m, c);
        DeviceBuffer ws(ws_bytes);
        ws.poison(), sdy.poison(), sdyx.poison(), dx.poison();
        const uint8_t* mp = masked ? mask.ptr() : nullptr;
        cuda::bn_backward_reduce(dt, dy.ptr(), nullptr, mp, x.ptr(), dmean.f32(), dinv.f32(), m, c,
                                 sdy.f32(), sdyx.f32(), ws.get(), ws_bytes, nullptr, "test");
        sync();
        expect_close("sum_dy (dbeta)", sdy.get(), r_sdy, 1e-5);
        expect_close("sum_dy_xhat (dgamma)", sdyx.get(), r_sdyx, 1e-5);

        DeviceTensor sdy_ref(DType::F32, sdy32), sdyx_ref(DType::F32, sdyx32);
        cuda::bn_backward_apply(dt, dy.ptr(), mp, x.ptr(), dgamma.f32(), dmean.f32(), dinv.f32(),
                                sdy_ref.f32(), sdyx_ref.f32(), m, c, m, dx.ptr(), nullptr, "test");
        sync();
        expect_close("dx", dx.get(), r_dx, tolerance(dt));

        // dx aliasing dy, then aliasing x.
        DeviceTensor inplace_dy(dt, dyv, k.offset), inplace_x(dt, xv, k.offset);
        cuda::bn_backward_apply(dt, inplace_dy.ptr(), mp, x.ptr(), dgamma.f32(), dmean.f32(),
                                dinv.f32(), sdy_ref.f32(), sdyx_ref.f32(), m, c, m, inplace_dy.ptr(),
                                nullptr, "test");
        cuda::bn_backward_apply(dt, dy.ptr(), mp, inplace_x.ptr(), dgamma.f32(), dmean.f32(),
                                dinv.f32(), sdy_ref.f32(), sdyx_ref.f32(), m, c, m, inplace_x.ptr(),
                                nullptr, "test");
        sync();
        expect_close("dx written over dy", inplace_dy.get(), r_dx, tolerance(dt));
        expect_close("dx written over x", inplace_x.get(), r_dx, tolerance(dt));
      }
}

TEST(BatchNormGpu, RejectsBadArguments) {
  KILN_REQUIRE_GPU();
  DeviceTensor x(DType::F32, 64), y(DType::F32, 64), sc(DType::F32, 8);
  DeviceBytes bits(8);
  // A mask without the ReLU it records.
  EXPECT_THROW(cuda::bn_apply(DType::F32, x.ptr(), sc.f32(), sc.f32(), 8, 8, false, y.ptr(),
                              bits.ptr(), nullptr, nullptr, "test"),
               Error);
  EXPECT_THROW(cuda::bn_apply(DType::F64, x.ptr(), sc.f32(), sc.f32(), 8, 8, false, y.ptr(),
                              nullptr, nullptr, nullptr, "test"),
               Error);
  EXPECT_THROW(cuda::bn_apply(DType::F32, x.ptr(), sc.f32(), sc.f32(), 8, 0, false, y.ptr(),
                              nullptr, nullptr, nullptr, "test"),
               Error);
}

}  // namespace
}  // namespace kiln

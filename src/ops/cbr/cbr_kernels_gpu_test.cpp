// CBR's non-cuDNN GPU stages (apply + ReLU + bit mask, two-pass ReLU/BN backward, mask
// expansion) against plain double-precision references on the same rounded inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/error.h"
#include "ops/batchnorm/batchnorm_cuda.h"
#include "ops/cbr/cbr_cuda_kernels.h"
#include "support/cpu_test_util.h"
#include "support/gpu_test_util.h"

namespace kiln {
namespace {

using namespace gpu_test;

const std::vector<TileCase> kCases = {{7, 3},       {1000, 8},    {3136, 64}, {20001, 100},
                                  {2500, 256},  {100352, 64}, {99999, 3}, {257, 2600},
                                  {1000, 8, 1}, {3136, 64, 1}};
const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16};


TEST(CbrKernelsGpu, ApplyReluBitmaskMatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(21);
  for (DType dt : kDtypes)
    for (const TileCase& k : kCases) {
      SCOPED_TRACE(label(dt, k));
      const int64_t n = k.m * k.c;
      const std::vector<double> xv = random_values(dt, n, rng, 0.3, 1.2);
      const std::vector<double> sc = random_values(DType::F32, k.c, rng, 0.8, 0.5),
                                sh = random_values(DType::F32, k.c, rng, 0.0, 0.5);
      const auto [pre, slack, want] = apply_reference(xv, sc, sh, k.c, /*relu=*/true);
      DeviceTensor x(dt, xv, k.offset), y(dt, n, k.offset), dsc(DType::F32, sc),
          dsh(DType::F32, sh);
      DeviceBytes bits(cuda::bitmask_bytes(n)), bytes(n);
      for (uint8_t poison : {0xFF, 0x00}) {
        y.poison(), bits.poison(poison), bytes.poison(poison);
        cuda::cbr_apply_relu_bitmask(dt, x.ptr(), dsc.f32(), dsh.f32(), k.m, k.c, y.ptr(),
                                     bits.ptr(), nullptr, "test");
        cuda::cbr_bitmask_to_bytes(bits.ptr(), n, bytes.ptr(), nullptr, "test");
        sync();
        expect_close("y", y.get(), want, tolerance(dt));
        expect_mask_equal("bit mask", bits.get(), pre, slack);
        // The expanded mask is exactly the bits, one byte each.
        const std::vector<uint8_t> b = bits.get(), e = bytes.get();
        size_t bad = 0;
        for (int64_t i = 0; i < n; ++i) bad += e[i] != uint8_t(bit(b, i));
        EXPECT_EQ(bad, 0u) << "cbr_bitmask_to_bytes disagrees with the bit mask";
      }
    }
}

TEST(CbrKernelsGpu, BackwardMatchesReference) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(22);
  for (DType dt : kDtypes)
    for (const TileCase& k : kCases) {
      SCOPED_TRACE(label(dt, k));
      const int64_t m = k.m, c = k.c, n = m * c;
      const std::vector<double> dyv = random_values(dt, n, rng, 0.05, 1.0),
                                xv = random_values(dt, n, rng, -0.4, 2.0),
                                gamma = random_values(DType::F32, c, rng, 1.0, 0.3);
      const std::vector<uint8_t> maskv = random_bytes(cuda::bitmask_bytes(n), rng);
      std::vector<double> mean, inv;
      reference_stats(xv, m, c, mean, inv);
      const BnBackwardReference ref = bn_backward_reference(dyv, &maskv, xv, gamma, mean, inv, m, c);
      const std::vector<double>&dbeta = ref.sum_dy, &dgamma = ref.sum_dy_xhat, &dconv = ref.dx;

      DeviceTensor dy(dt, dyv, k.offset), x(dt, xv, k.offset), out(dt, n, k.offset),
          dgam(DType::F32, gamma), dmean(DType::F32, mean), dinv(DType::F32, inv),
          gdg(DType::F32, c), gdb(DType::F32, c);
      DeviceBytes mask(maskv);
      const size_t ws_bytes = cuda::cbr_backward_workspace_bytes(m, c);
      DeviceBuffer ws(ws_bytes);
      ws.poison(), out.poison(), gdg.poison(), gdb.poison();
      cuda::cbr_backward(dt, dy.ptr(), mask.ptr(), x.ptr(), dgam.f32(), dmean.f32(), dinv.f32(), m,
                         c, out.ptr(), gdg.f32(), gdb.f32(), ws.get(), ws_bytes, nullptr, "test");
      sync();
      expect_close("dbeta", gdb.get(), dbeta, 1e-5);
      expect_close("dgamma", gdg.get(), dgamma, 1e-5);
      expect_close("dconv", out.get(), dconv, tolerance(dt));

      // dconv written over dy (the static plan reuses dy's storage).
      DeviceTensor dy_inplace(dt, dyv, k.offset);
      cuda::cbr_backward(dt, dy_inplace.ptr(), mask.ptr(), x.ptr(), dgam.f32(), dmean.f32(),
                         dinv.f32(), m, c, dy_inplace.ptr(), gdg.f32(), gdb.f32(), ws.get(),
                         ws_bytes, nullptr, "test");
      sync();
      expect_close("dconv over dy", dy_inplace.get(), dconv, tolerance(dt));

      // Pass 2 in two row slices, as the pipelined backward runs it, gives the same dconv.
      const int64_t half = m / 2 / 8 * 8;  // row0 * c on a whole mask byte
      if (half > 0) {
        DeviceTensor sliced(dt, n, k.offset);
        sliced.poison();
        for (const auto& [row0, rows] : {std::pair<int64_t, int64_t>{0, half}, {half, m - half}})
          cuda::cbr_backward_apply(dt, dy.ptr(), mask.ptr(), x.ptr(), dgam.f32(), dmean.f32(), dinv.f32(),
                                   gdg.f32(), gdb.f32(), m, c, row0, rows, sliced.ptr(), nullptr, "test");
        sync();
        expect_close("dconv in two slices", sliced.get(), dconv, tolerance(dt));
      }
    }
}

// Forward mask -> backward: the gradient is exactly zero wherever the ReLU blocked.
TEST(CbrKernelsGpu, BackwardZeroesBlockedElementsOfDy) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(23);
  const int64_t m = 4096, c = 64, n = m * c;
  const DType dt = DType::F16;
  const std::vector<double> dyv = random_values(dt, n, rng), xv = random_values(dt, n, rng);
  DeviceTensor dy(dt, dyv), x(dt, xv), y(dt, n), ones(DType::F32, std::vector<double>(c, 1.0)),
      zeros(DType::F32, std::vector<double>(c, 0.0)), dconv(dt, n), dg(DType::F32, c),
      db(DType::F32, c), dgamma_ref(DType::F32, c), dbeta_ref(DType::F32, c);
  DeviceBytes bits(cuda::bitmask_bytes(n));
  // scale 1, shift 0: the mask is exactly x > 0.
  cuda::cbr_apply_relu_bitmask(dt, x.ptr(), ones.f32(), zeros.f32(), m, c, y.ptr(), bits.ptr(),
                               nullptr, "test");
  const size_t ws_bytes = cuda::cbr_backward_workspace_bytes(m, c);
  DeviceBuffer ws(ws_bytes);
  cuda::cbr_backward(dt, dy.ptr(), bits.ptr(), x.ptr(), ones.f32(), zeros.f32(), ones.f32(), m, c,
                     dconv.ptr(), dg.f32(), db.f32(), ws.get(), ws_bytes, nullptr, "test");
  sync();
  std::vector<double> want_db(c, 0.0);
  for (int64_t i = 0; i < n; ++i)
    if (xv[i] > 0) want_db[i % c] += dyv[i];
  expect_close("dbeta = sum of dy where x > 0", db.get(), want_db, 1e-5);
}

TEST(CbrKernelsGpu, BitmaskToBytesHandlesTailsAndMisalignment) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(24);
  for (int64_t n : {1, 7, 8, 9, 1000, 100003})
    for (size_t offset : {0, 3}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " offset=" + std::to_string(offset));
      const std::vector<uint8_t> bitsv = random_bytes(cuda::bitmask_bytes(n), rng);
      DeviceBytes bits(bitsv), bytes(n, offset);
      bytes.poison(0xFF);
      cuda::cbr_bitmask_to_bytes(bits.ptr(), n, bytes.ptr(), nullptr, "test");
      sync();
      const std::vector<uint8_t> got = bytes.get();
      size_t bad = 0;
      for (int64_t i = 0; i < n; ++i) bad += got[i] != uint8_t(bit(bitsv, i));
      EXPECT_EQ(bad, 0u);
      // Nothing past n was written.
      EXPECT_EQ(bytes.buf.download(1, offset + n)[0], 0xFF) << "wrote past the end";
    }
}

TEST(CbrKernelsGpu, RejectsMissingMaskAndSmallWorkspace) {
  KILN_REQUIRE_GPU();
  const int64_t m = 512, c = 64, n = m * c;
  DeviceTensor a(DType::F16, n), b(DType::F16, n), p(DType::F32, c);
  DeviceBytes bits(cuda::bitmask_bytes(n));
  EXPECT_THROW(cuda::cbr_apply_relu_bitmask(DType::F16, a.ptr(), p.f32(), p.f32(), m, c, b.ptr(),
                                            nullptr, nullptr, "test"),
               Error);
  const size_t ws_bytes = cuda::cbr_backward_workspace_bytes(m, c);
  DeviceBuffer ws(ws_bytes);
  EXPECT_THROW(
      cuda::cbr_backward(DType::F16, a.ptr(), bits.ptr(), a.ptr(), p.f32(), p.f32(), p.f32(), m, c,
                         b.ptr(), p.f32(), p.f32(), ws.get(), 16, nullptr, "test"),
      Error);
}

}  // namespace
}  // namespace kiln

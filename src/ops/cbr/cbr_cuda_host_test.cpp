// Argument checks of the CBR CUDA kernels made on the host before anything is launched: they need
// the CUDA backend built, not a GPU, so they run in the CPU suite.
#include <gtest/gtest.h>

#include <cstdint>

#include "ops/cbr/cbr_cuda_kernels.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

TEST(CbrKernelsHost, BackwardApplySliceMustStartOnAWholeMaskByte) {
  float f = 0;
  uint8_t bits = 0;
  kiln::testing::expect_error(
      [&] { cuda::cbr_backward_apply(DType::F32, &f, &bits, &f, &f, &f, &f, &f, &f, 10, 3, 1, 2, &f, nullptr, "test"); },
      {"whole mask byte"});
}

}  // namespace
}  // namespace kiln

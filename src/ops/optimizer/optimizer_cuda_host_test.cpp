// AdamW's per-step scalars, computed on the host for the CUDA update kernel: PyTorch's bias
// correction. Needs the CUDA backend built, not a GPU, so it runs in the CPU suite.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/error.h"
#include "ops/optimizer/optimizer_cuda.h"

namespace kiln {
namespace {

TEST(OptimizerHost, AdamWScalarsFollowPyTorchBiasCorrection) {
  const cuda::AdamWScalars s = cuda::adamw_scalars(1e-3, 0.9, 0.999, 1e-8, 0.05, 3);
  EXPECT_FLOAT_EQ(s.keep, float(1 - 1e-3 * 0.05));
  EXPECT_FLOAT_EQ(s.step_size, float(1e-3 / (1 - std::pow(0.9, 3))));
  EXPECT_FLOAT_EQ(s.bias2_sqrt, float(std::sqrt(1 - std::pow(0.999, 3))));
  EXPECT_THROW(cuda::adamw_scalars(1e-3, 0.9, 0.999, 1e-8, 0.0, 0), Error);
}

}  // namespace
}  // namespace kiln

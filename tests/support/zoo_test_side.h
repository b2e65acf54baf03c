#pragma once
// What the tests that run whole zoo models share: the side they run each at, and NCHW batches (as
// PyTorch and ONNX take them) in kiln's NHWC order.
#include <algorithm>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/compile.h"

namespace kiln::testing {

// The side the export tests run each zoo model at: its own when small, else 64 (most ImageNet
// models take any size from 32 on; 64 keeps a 2x2 map before VGG's classifier, so its columns are
// permuted), or the model's smallest where that is larger (Inception v3: 75).
inline int zoo_test_side(const Blueprint& bp) {
  CompileOptions o;
  o.batch = 1;
  const int64_t smallest = min_input_side(bp, o);
  return int(std::min<int64_t>(bp.input_hwc()->at(0), std::max<int64_t>(64, smallest)));
}

// How the whole-model tests compile a zoo model: batch 2 at zoo_test_side, in the model's channels.
inline CompileOptions zoo_test_options(const Blueprint& bp) {
  const int side = zoo_test_side(bp);
  CompileOptions o;
  o.batch = 2;
  o.input_hwc = {side, side, bp.input_hwc()->at(2)};
  return o;
}

// NCHW values in kiln's NHWC order.
inline std::vector<float> nhwc_of(const std::vector<float>& nchw, const Shape& s) {
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  std::vector<float> nhwc(nchw.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) nhwc[((n * H + h) * W + w) * C + c] = nchw[((n * C + c) * H + h) * W + w];
  return nhwc;
}

}  // namespace kiln::testing

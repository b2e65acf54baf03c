// CBR's cuDNN graph definition, checked on the host (no GPU needed). Its name is part of the plan
// cache keys that earlier runs wrote to disk, so it is pinned here; and it must not collide with
// the conv family's graphs, whose names share the plan cache.
#include <gtest/gtest.h>

#include <string>

#include "ops/cbr/cbr_cudnn_graphs_cuda.h"
#include "ops/conv/conv_cudnn_graphs_cuda.h"

namespace kiln::cuda {
namespace {

TEST(CbrCudnnGraphs, KeepsItsPlanCacheNameAndDefinesItsGraph) {
  ASSERT_NE(kConvScaleShiftReluGraph.name, nullptr);
  EXPECT_STREQ(kConvScaleShiftReluGraph.name, "CONV_SCALE_SHIFT_RELU");
  EXPECT_NE(kConvScaleShiftReluGraph.define, nullptr);
  for (const CudnnGraphDef* conv : {&kConvFpropGraph, &kConvFpropGenstatsGraph, &kConvDgradGraph, &kConvWgradGraph})
    EXPECT_NE(std::string(conv->name), kConvScaleShiftReluGraph.name);
}

}  // namespace
}  // namespace kiln::cuda

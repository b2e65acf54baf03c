// The convolution family's cuDNN graph definitions, checked on the host (no GPU needed). Their
// names are part of the plan cache keys that earlier runs wrote to disk: a renamed graph would
// silently re-tune every shape, so the names are pinned here.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ops/conv/conv_cudnn_graphs_cuda.h"

namespace kiln::cuda {
namespace {

TEST(ConvCudnnGraphs, KeepTheirPlanCacheNamesAndDefineTheirGraphs) {
  const struct {
    const CudnnGraphDef& graph;
    const char* name;
  } kGraphs[] = {{kConvFpropGraph, "CONV_FPROP"},
                 {kConvFpropGenstatsGraph, "CONV_FPROP_GENSTATS"},
                 {kConvDgradGraph, "CONV_DGRAD"},
                 {kConvWgradGraph, "CONV_WGRAD"}};
  std::set<std::string> names;
  for (const auto& g : kGraphs) {
    ASSERT_NE(g.graph.name, nullptr);
    EXPECT_STREQ(g.graph.name, g.name);
    EXPECT_NE(g.graph.define, nullptr) << g.name;
    EXPECT_TRUE(names.insert(g.graph.name).second) << g.name << " is used twice";
  }
}

}  // namespace
}  // namespace kiln::cuda

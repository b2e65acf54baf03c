// How imported layers are named (src/import/onnx_layer_names.h): after their initializers' module,
// or after PyTorch's scope names in the node's name, with the characters kiln keeps, unique.
#include <gtest/gtest.h>

#include "import/onnx_layer_names.h"

namespace kiln::onnx_import {
namespace {

TEST(OnnxLayerNames, ModulesOfInitializers) {
  EXPECT_EQ(shared_module({"layer1.0.conv1.weight"}), "layer1.0.conv1");
  EXPECT_EQ(shared_module({"features.0.weight", "features.0.bias"}), "features.0");
  EXPECT_EQ(shared_module({"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}), "bn");
  EXPECT_EQ(shared_module({"a.weight", "b.bias"}), std::nullopt);           // two modules
  EXPECT_EQ(shared_module({"onnx::Conv_193"}), std::nullopt);              // no module part
  EXPECT_EQ(shared_module({"model/conv:0.weight"}), std::nullopt);         // characters kiln does not keep
  EXPECT_EQ(shared_module({".weight"}), std::nullopt);
}

TEST(OnnxLayerNames, NodeNamesAsModulePaths) {
  EXPECT_EQ(name_from_node("/layer1/layer1.0/relu/Relu", "Relu", ""), "layer1.0.relu");
  EXPECT_EQ(name_from_node("/layer1/layer1.0/Add", "Add", ""), "layer1.0");
  EXPECT_EQ(name_from_node("/features/features.3/Relu_2", "Relu", ""), "features.3");
  // A Sequential's child inside a module: "block.3" is the child 3 of features.1.0's block.
  EXPECT_EQ(name_from_node("/features/features.1/features.1.0/block/block.3/MatMul", "MatMul", ""),
            "features.1.0.block.3");
  // A node the importer made a kiln one of another type keeps its modules' name.
  EXPECT_EQ(name_from_node("/features/features.1/features.1.0/stochastic_depth/Mul", "StochasticDepth", ""),
            "features.1.0.stochastic_depth");
  // The dynamo exporter's name scopes: conv.0.0 inside features.1's conv.
  EXPECT_EQ(name_from_node("/features/features.1/conv/conv.0/conv.0.0/conv2d", "Conv", ""), "features.1.conv.0.0");
  EXPECT_EQ(name_from_node("/Flatten", "Flatten", ""), "Flatten");  // the op alone stays: no module
  EXPECT_EQ(name_from_node("layer4.1.relu", "Relu", ""), "layer4.1.relu");  // kiln's own exports
  EXPECT_EQ(name_from_node("conv1:bn", "BatchNormalization", ""), "conv1_bn");
  EXPECT_EQ(name_from_node("", "Relu", "onnx::Relu_12"), "onnx__Relu_12");
  EXPECT_EQ(name_from_node("", "Relu", ""), "node");
  EXPECT_EQ(kiln_safe_name("..a..b/c d."), "a.b_c_d");
}

TEST(OnnxLayerNames, EveryNameIsUnique) {
  LayerNames names;
  EXPECT_EQ(names.claim("input"), "input_2");  // the graph's input layer's
  EXPECT_EQ(names.claim("conv1"), "conv1");
  EXPECT_EQ(names.claim("conv1"), "conv1_2");
  EXPECT_EQ(names.claim("conv1"), "conv1_3");
  EXPECT_TRUE(names.taken("conv1_2"));
  EXPECT_FALSE(names.taken("conv2"));
}

}  // namespace
}  // namespace kiln::onnx_import

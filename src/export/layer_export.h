#pragma once
// How each layer kind is exported, declared beside its lowering and its ops: the family's
// src/ops/<family>/<name>_export.cpp (src/export/flatten_export.cpp for Flatten, whose lowering
// emits no ops) defines `extern const LayerExport k<Name>Export{<kind>, ...}`: the layer's ONNX
// nodes in eval mode, written through OnnxLayerWriter (kiln's own graph, src/export/onnx_graph.h,
// so the code builds with or without the ONNX library), and which of its tensors PyTorch's
// state_dict holds, in which layout. The build collects every definition into a generated list
// (cmake/layer_exports.cmake); the exporters loop over the layers and look each kind up there, so no
// exporter names a layer kind; tests/architecture/layer_exports_test.cpp fails for a kind a program
// can hold that has not exactly one.
#include <string>
#include <vector>

#include "kiln/layer_graph.h"

namespace kiln {

class OnnxLayerWriter;  // export/onnx_layer_writer.h

// A program's layers as the exports read them: with each layer's consumers, computed once.
struct ExportedGraph {
  explicit ExportedGraph(const LayerGraph& g) : graph(g), layers(g.layers), consumers(g.consumers()) {}
  const LayerGraph& graph;
  const std::vector<Layer>& layers;
  const std::vector<std::vector<int>> consumers;
};

// How one of kiln's tensors is laid out in PyTorch's state_dict (src/formats/torch/torch_layouts.h).
enum class TorchLayout {
  AsIs,              // the same shape and order: vectors, a linear layer's [out, in] weight
  Filter,            // a convolution's KRSC filter, OIHW in PyTorch
  FlattenedColumns,  // a linear layer's weight reading a flattened feature map: columns C,H,W, not H,W,C
};

// One tensor of a layer that PyTorch's state_dict holds, under the name kiln::torch_names gives it.
struct TorchParam {
  std::string tensor;  // kiln's name ("layer1.0.conv1.weight")
  TorchLayout layout = TorchLayout::AsIs;
  Shape map_hwc;  // FlattenedColumns: the flattened map's {H, W, C}
  // A Filter whose convolution has no bias and feeds a BatchNorm: with
  // TorchExportOptions::conv_bias_before_bn a zero bias follows it (torchvision's VGG-BN has one).
  bool zero_bias_before_bn = false;

  static TorchParam as_is(std::string tensor) { return {std::move(tensor), TorchLayout::AsIs, {}, false}; }
  static TorchParam filter(std::string tensor, bool zero_bias_before_bn) {
    return {std::move(tensor), TorchLayout::Filter, {}, zero_bias_before_bn};
  }
  static TorchParam flattened_columns(std::string tensor, Shape map_hwc) {
    return {std::move(tensor), TorchLayout::FlattenedColumns, std::move(map_hwc), false};
  }
};

struct LayerExport {
  LayerKind kind;
  // Writes layer `layer`'s nodes (eval mode) through `out`; returns the ONNX value holding its output.
  std::string (*onnx)(OnnxLayerWriter& out, int layer);
  // Appends the layer's tensors that a state_dict holds, in its order; nullptr for a kind without any.
  void (*torch_params)(const ExportedGraph& graph, int layer, std::vector<TorchParam>& params);
};

const std::vector<const LayerExport*>& all_layer_exports();  // generated (cmake/layer_exports.cmake)
// The export of `kind`; nullptr for a kind without one (the exporters say which layer).
const LayerExport* find_layer_export(LayerKind kind);

}  // namespace kiln

#pragma once
// What a layer kind's ONNX export (LayerExport::onnx) writes through: the layer graph, the ONNX
// values of the layers written before it, nodes and constants, and the program's weights, read and
// added as initializers under PyTorch's names. Values are NCHW from the input on (the layer graph's
// shapes are kiln's NHWC), filters OIHW.
#include <set>
#include <string>
#include <vector>

#include "export/layer_export.h"
#include "export/onnx_graph.h"
#include "kiln/executable.h"
#include "kiln/export.h"

namespace kiln {

class OnnxLayerWriter {
 public:
  OnnxLayerWriter(Executable& exe, const OnnxExportOptions& options, onnx_export::Graph& graph);

  const ExportedGraph& graph() const { return graph_; }
  const Layer& layer(int i) const { return graph_.layers.at(size_t(i)); }
  // Whether a BatchNorm after a convolution folds into its weight and bias (OnnxExportOptions::fold_bn).
  bool fold_bn() const { return options_.fold_bn; }
  // The ONNX value holding input `k` of layer `layer` (the graph's input for a layer without inputs).
  const std::string& input(int layer, size_t k = 0) const;

  // Adds a node; returns `output`, which also names the node.
  std::string node(const std::string& op_type, std::vector<std::string> inputs, const std::string& output,
                   std::vector<onnx_export::Attribute> attributes = {});
  // A float32 scalar constant, one initializer per value (for composed activations).
  std::string scalar(float value);
  // The model's metadata_props entry `key` (made empty the first time), for what no ONNX node of a
  // layer can hold (stochastic depth's probability: ops/elementwise/stochastic_depth_onnx.h).
  std::string& metadata(const std::string& key);

  Executable& executable() { return exe_; }
  Shape tensor_shape(const std::string& tensor) const;
  // The tensor's values as float32 (export_layout::read_floats: a diverged model is refused).
  std::vector<float> read(const std::string& tensor);
  // Adds a weight, already in ONNX's layout, as an initializer named as PyTorch names kiln's
  // `kiln_name` (kiln::torch_names; a folded convolution's bias beside its weight; kiln's name where
  // PyTorch has none); returns that name.
  std::string weight(const std::string& kiln_name, Shape shape, std::vector<float> values);

  // The layer being written also computes layer `consumer` (a convolution the BatchNorm after it,
  // folded into its weights): `value` is the consumer's output, and its own export is not called.
  void absorb(int consumer, std::string value);

  // The exporter's side (onnx_graph_builder.cpp): which layers are written, and their values.
  bool absorbed(int layer) const { return absorbed_.count(layer) > 0; }
  void set_value(int layer, std::string value) { value_.at(size_t(layer)) = std::move(value); }
  const std::string& value(int layer) const { return value_.at(size_t(layer)); }

 private:
  Executable& exe_;
  const OnnxExportOptions& options_;
  ExportedGraph graph_;
  onnx_export::GraphWriter out_;
  std::map<std::string, std::string> torch_;  // kiln::torch_names
  std::vector<std::string> value_;            // the ONNX value holding each layer's output
  std::set<int> absorbed_;
};

// The attributes of a sliding window (convolution, pooling): kernel_shape, strides, pads (ONNX's
// order: top, left, bottom, right).
std::vector<onnx_export::Attribute> window_attributes(int kernel_h, int kernel_w, int stride_h, int stride_w,
                                                      int pad_top, int pad_left, int pad_bottom, int pad_right);

}  // namespace kiln

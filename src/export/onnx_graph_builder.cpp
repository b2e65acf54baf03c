// A program's layer graph as ONNX nodes. The layer graph, not the op list, is read: it holds each
// layer's kind and attributes as the model was written (after the compiler's fusions, whose layers
// keep the names of the convolution and BatchNorm they came from), while the ops hold kiln's fused
// kernels and NHWC buffers. Each layer's nodes come from its kind's export (LayerExport::onnx, in
// the kind's family folder), in the graph's order.
#include <fmt/format.h>

#include "export/layer_export.h"
#include "export/model_metadata.h"
#include "export/onnx_graph.h"
#include "export/onnx_layer_writer.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"

namespace kiln::onnx_export {
namespace {

using export_layout::model_metadata;

class Builder {
 public:
  Builder(Executable& exe, const OnnxExportOptions& options)
      : exe_(exe), layers_(exe.program().graph.layers), options_(options), out_(exe, options, graph_) {}

  Graph build() {
    const Program& p = exe_.program();
    const Shape& input = p.tensors.at(p.input).shape;  // N, H, W, C
    if (input.size() != 4) fail("the program's input is {}; ONNX export needs an image input (N,H,W,C)", shape_str(input));
    const Layer& last = layers_.back();
    if (last.out_shape.size() != 2)
      fail("the model's last layer '{}' gives {}; ONNX export writes (N, classes) logits, so end the model with fc()",
           last.name, shape_str(last.out_shape));
    graph_.input_chw = {input[3], input[1], input[2]};
    graph_.classes = last.out_shape[1];
    describe();  // first: refuses class names that do not fit before any weight is read
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (out_.absorbed(int(i))) continue;  // written by the layer before it (a folded BatchNorm)
      const Layer& l = layers_[i];
      const LayerExport* e = find_layer_export(l.kind);
      if (!e)
        fail("layer '{}' ({}) has no ONNX form in kiln's exporter: its kind has no LayerExport "
             "(src/export/layer_export.h says where one goes)", l.name, layer_kind_name(l.kind));
      out_.set_value(int(i), e->onnx(out_, int(i)));
    }
    name_output(out_.value(int(layers_.size()) - 1));
    return std::move(graph_);
  }

 private:
  // The model's result becomes "logits": the node making it is renamed, unless another node reads it
  // too (then an Identity copies it). A layer the user named "logits" first gives the name up.
  void name_output(std::string result) {
    const std::string renamed = fmt::format("{}:layer", kOutputName);
    for (Node& n : graph_.nodes) {
      for (std::string& in : n.inputs)
        if (in == kOutputName) in = renamed;
      for (std::string& out : n.outputs)
        if (out == kOutputName) out = n.name = renamed;
    }
    if (result == kOutputName) result = renamed;
    bool read_elsewhere = result == kInputName;
    for (const Node& n : graph_.nodes)
      for (const std::string& in : n.inputs) read_elsewhere = read_elsewhere || in == result;
    if (read_elsewhere) {
      out_.node("Identity", {result}, kOutputName);
      return;
    }
    for (Node& n : graph_.nodes)
      for (std::string& o : n.outputs)
        if (o == result) o = n.name = kOutputName;
  }

  void describe() {
    const ExportedModelInfo& info = options_.info;
    graph_.name = info.model.empty() ? "kiln_model" : info.model;
    graph_.metadata = model_metadata(info, graph_.classes);
    graph_.metadata["batch_norm"] = options_.fold_bn ? "folded" : "kept";
    graph_.doc = fmt::format(
        "{} exported by kiln {}. Input 'input': float32 [N, {}, {}, {}] (NCHW), each channel normalized as "
        "(pixel / 255 - norm_mean) / norm_std (metadata). Output 'logits': float32 [N, {}], before softmax.",
        graph_.name, kVersion, graph_.input_chw[0], graph_.input_chw[1], graph_.input_chw[2], graph_.classes);
  }

  Executable& exe_;
  const std::vector<Layer>& layers_;
  const OnnxExportOptions& options_;
  Graph graph_;
  OnnxLayerWriter out_;  // writes into graph_
};

}  // namespace

Graph build_onnx_graph(Executable& exe, const OnnxExportOptions& options) { return Builder(exe, options).build(); }

}  // namespace kiln::onnx_export

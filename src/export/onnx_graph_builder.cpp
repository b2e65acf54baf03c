// A program's layer graph as ONNX nodes. The layer graph, not the op list, is read: it holds each
// layer's kind and attributes as the model was written (after the compiler's fusions, whose layers
// keep the names of the convolution and BatchNorm they came from), while the ops hold kiln's fused
// kernels and NHWC buffers. Values are NCHW from the input on, so only the flatten of a feature map
// needs care: PyTorch's (and ONNX's) runs C,H,W, kiln's H,W,C.
#include <fmt/format.h>

#include <set>

#include "export/batch_norm_fold.h"
#include "export/model_metadata.h"
#include "export/onnx_graph.h"
#include "export/weight_layouts.h"
#include "ir/fused_layer_kinds.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"
#include "kiln/torch_weights.h"
#include "train/torch_layouts.h"

namespace kiln::onnx_export {
namespace {

using A = Attribute;
using namespace export_layout;

std::string kind_name(LayerKind kind) {
  const char* fused = fused_layer_kind_name(kind);
  return fused ? fused : layer_kind_name(kind);
}

class Builder {
 public:
  Builder(Executable& exe, const OnnxExportOptions& options)
      : exe_(exe), layers_(exe.program().graph.layers), options_(options), out_(graph_),
        consumers_(exe.program().graph.consumers()), torch_(torch_names(exe.program())), value_(layers_.size()) {}

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
    value_[0] = kInputName;
    for (size_t i = 1; i < layers_.size(); ++i) layer(int(i));
    name_output(value_.back());
    return std::move(graph_);
  }

 private:
  void layer(int i) {
    const Layer& l = layers_[i];
    const std::string& x = l.inputs.empty() ? value_[0] : value_[l.inputs[0]];
    std::string& y = value_[i];
    switch (l.kind) {
      case LayerKind::Conv: {
        // A BatchNorm that is this convolution's one consumer folds into it.
        const int bn = folding_batch_norm(i);
        if (bn < 0) {
          y = conv(l, l.name, "", 0.f, x, l.name);
        } else {
          folded_.insert(bn);
          y = value_[bn] = conv(l, l.name, layers_[bn].name, layers_[bn].attrs.eps, x, layers_[bn].name);
        }
        return;
      }
      case LayerKind::BatchNorm:
        if (!folded_.count(i)) y = batch_norm(layers_[i].name, l.attrs.eps, x, l.name);
        return;
      case LayerKind::CBR:
        y = out_.node("Relu", {conv(l, l.conv_name, l.bn_name, l.attrs.eps, x, l.name + ":bn")}, l.name);
        return;
      case LayerKind::ReLU:
        y = out_.node("Relu", {x}, l.name);
        return;
      case LayerKind::Activation:
        write_activation(out_, l.attrs.activation, l.attrs.alpha, x, l.name);
        y = l.name;
        return;
      case LayerKind::Add:
        y = out_.node("Add", {x, value_[l.inputs.at(1)]}, l.name);
        return;
      case LayerKind::MaxPool:
        y = out_.node("MaxPool", {x}, l.name, window(l));
        return;
      case LayerKind::AvgPool: {  // kiln, as PyTorch, divides by the window's size, padding included
        std::vector<A> attributes = window(l);
        attributes.push_back(A::integer("count_include_pad", 1));
        y = out_.node("AveragePool", {x}, l.name, std::move(attributes));
        return;
      }
      case LayerKind::GlobalAvgPool:  // kiln's gives (N, C): ONNX's keeps the 1x1 map
        y = out_.node("Flatten", {out_.node("GlobalAveragePool", {x}, l.name + ":map")}, l.name,
                      {A::integer("axis", 1)});
        return;
      case LayerKind::Flatten:
        y = flatten(i, x);
        return;
      case LayerKind::Linear:
        y = linear(l, x);
        return;
      case LayerKind::Dropout:  // the identity in eval mode
        y = x;
        return;
      default: break;
    }
    if (l.kind == fused_layer::ConvBN) {  // Conv -> BN, whose normalization kiln applies in the block end
      y = conv(l, l.conv_name, l.bn_name, l.attrs.eps, x, l.name + ":bn");
    } else if (l.kind == fused_layer::BnAddRelu) {  // both inputs come normalized from their conv_bn
      y = out_.node("Relu", {out_.node("Add", {x, value_[l.inputs.at(1)]}, l.name + ":add")}, l.name);
    } else {
      fail("layer '{}' ({}) has no ONNX form in kiln's exporter (src/export/onnx_graph_builder.cpp)", l.name,
           kind_name(l.kind));
    }
  }

  // The BatchNorm layer that convolution `i` folds into, or -1.
  int folding_batch_norm(int i) const {
    if (!options_.fold_bn || consumers_[i].size() != 1) return -1;
    const int bn = consumers_[i][0];
    return layers_[bn].kind == LayerKind::BatchNorm && layers_[bn].out_shape.size() == 4 ? bn : -1;
  }

  std::vector<A> window(const Layer& l) const {
    const int64_t k = l.attrs.kernel, s = l.attrs.stride, p = l.attrs.padding;
    return {A::integers("kernel_shape", {k, k}), A::integers("strides", {s, s}), A::integers("pads", {p, p, p, p})};
  }

  // Convolution `conv_name` of layer `l` from x, then BatchNorm `bn_name` with epsilon `eps` (none when
  // the name is empty; a fused layer's attributes hold its BatchNorm's eps, a Conv layer's do not),
  // folded into it or as a node of its own; the result is named y.
  std::string conv(const Layer& l, const std::string& conv_name, const std::string& bn_name, float eps,
                   const std::string& x, const std::string& y) {
    const std::string weight = conv_name + ".weight";
    const Shape krsc = exe_.program().tensors.at(exe_.id(weight)).shape;
    std::vector<float> w = torch_layout::krsc_to_oihw(read_floats(exe_, weight), krsc);
    std::vector<float> b;
    if (l.attrs.bias) b = read_floats(exe_, conv_name + ".bias");
    const std::vector<A> attributes = window(l);
    const bool fold = !bn_name.empty() && options_.fold_bn;
    if (fold) {
      if (b.empty()) b.assign(size_t(krsc[0]), 0.f);
      fold_batch_norm(w, b, read_batch_norm(exe_, bn_name, eps));
    }
    std::vector<std::string> inputs = {x, initializer(weight, torch_layout::oihw_shape(krsc), std::move(w))};
    if (!b.empty()) inputs.push_back(initializer(conv_name + ".bias", {krsc[0]}, std::move(b)));
    const std::string conv_out = bn_name.empty() || fold ? y : y + ":conv";
    out_.node("Conv", std::move(inputs), conv_out, attributes);
    return bn_name.empty() || fold ? y : batch_norm(bn_name, eps, conv_out, y);
  }

  std::string batch_norm(const std::string& bn, float eps, const std::string& x, const std::string& y) {
    BatchNormValues v = read_batch_norm(exe_, bn, eps);
    const Shape c = {int64_t(v.gamma.size())};
    return out_.node("BatchNormalization",
                     {x, initializer(bn + ".weight", c, std::move(v.gamma)),
                      initializer(bn + ".bias", c, std::move(v.beta)),
                      initializer(bn + ".running_mean", c, std::move(v.mean)),
                      initializer(bn + ".running_var", c, std::move(v.var))},
                     y, {A::real("epsilon", eps)});
  }

  // A feature map flattened as PyTorch does (C,H,W) when every consumer is a linear layer, whose
  // columns are then reordered to match; else first transposed to NHWC, so that the values come
  // in kiln's order for any other consumer.
  std::string flatten(int i, const std::string& x) {
    const Layer& l = layers_[i];
    const Shape& map = layers_[l.inputs.at(0)].out_shape;
    if (map.size() != 4) return x;  // already (N, F)
    const A axis = A::integer("axis", 1);
    bool only_linear = true;
    for (int c : consumers_[i]) only_linear = only_linear && layers_[c].kind == LayerKind::Linear;
    if (map[1] * map[2] == 1 || only_linear) {
      if (map[1] * map[2] > 1)
        for (int c : consumers_[i]) chw_columns_[layers_[c].name] = {map[1], map[2], map[3]};
      return out_.node("Flatten", {x}, l.name, {axis});
    }
    const std::string nhwc = out_.node("Transpose", {x}, l.name + ":nhwc", {A::integers("perm", {0, 2, 3, 1})});
    return out_.node("Flatten", {nhwc}, l.name, {axis});
  }

  std::string linear(const Layer& l, const std::string& x) {
    const std::string weight = l.name + ".weight";
    const Shape shape = exe_.program().tensors.at(exe_.id(weight)).shape;  // (out, in), as PyTorch's
    std::vector<float> w = read_floats(exe_, weight);
    if (auto map = chw_columns_.find(l.name); map != chw_columns_.end()) w = torch_layout::hwc_columns_to_chw(w, shape[0], map->second);
    std::vector<std::string> inputs = {x, initializer(weight, shape, std::move(w))};
    if (l.attrs.bias) inputs.push_back(initializer(l.name + ".bias", {shape[0]}, read_floats(exe_, l.name + ".bias")));
    return out_.node("Gemm", std::move(inputs), l.name, {A::integer("transB", 1)});
  }

  // Adds a weight under its PyTorch name (kiln::torch_names; a folded convolution's bias beside its
  // weight), so the graph's initializers read as torchvision's; kiln's name where it has none.
  std::string initializer(const std::string& kiln_name, Shape shape, std::vector<float> values) {
    std::string name = kiln_name;
    if (auto it = torch_.find(kiln_name); it != torch_.end()) {
      name = it->second;
    } else if (const size_t dot = kiln_name.rfind('.'); dot != std::string::npos) {
      // A folded bias: the convolution has none in kiln; PyTorch's would sit beside its weight.
      auto weight = torch_.find(kiln_name.substr(0, dot) + ".weight");
      if (weight != torch_.end()) name = weight->second.substr(0, weight->second.rfind('.')) + kiln_name.substr(dot);
    }
    out_.initializer(name, std::move(shape), std::move(values));
    return name;
  }

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
  GraphWriter out_;
  std::vector<std::vector<int>> consumers_;
  std::map<std::string, std::string> torch_;
  std::vector<std::string> value_;            // the ONNX value holding each layer's output
  std::set<int> folded_;                      // BatchNorm layers folded into the convolution before them
  std::map<std::string, Shape> chw_columns_;  // linear layers reading a C,H,W flatten, with the map's {H, W, C}
};

}  // namespace

Graph build_onnx_graph(Executable& exe, const OnnxExportOptions& options) { return Builder(exe, options).build(); }

}  // namespace kiln::onnx_export

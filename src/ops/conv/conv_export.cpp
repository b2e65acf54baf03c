// The Conv layer's export. A BatchNorm that is the convolution's one consumer folds into its weight
// and bias (OnnxExportOptions::fold_bn), as torch.onnx.export does in eval mode: the BatchNorm
// layer is then written here.
#include "ops/conv/conv_export.h"

#include "export/batch_norm_fold.h"
#include "formats/torch/torch_layouts.h"
#include "ops/batchnorm/batchnorm_export.h"

namespace kiln {

std::string onnx_conv_bn(OnnxLayerWriter& out, const Layer& l, const std::string& conv_name,
                         const std::string& bn_name, const BatchNormAttrs& bn, const std::string& x,
                         const std::string& y) {
  const std::string weight = conv_name + ".weight";
  const Shape krsc = out.tensor_shape(weight);
  std::vector<float> w = torch_layout::krsc_to_oihw(out.read(weight), krsc);
  std::vector<float> b;
  const ConvAttrs& a = attrs_of<ConvAttrs>(l);
  if (a.bias) b = out.read(conv_name + ".bias");
  const bool fold = !bn_name.empty() && out.fold_bn();
  if (fold) {
    if (b.empty()) b.assign(size_t(krsc[0]), 0.f);
    export_layout::fold_batch_norm(w, b, export_layout::read_batch_norm(out.executable(), bn_name, bn.eps));
  }
  std::vector<std::string> inputs = {x, out.weight(weight, torch_layout::oihw_shape(krsc), std::move(w))};
  if (!b.empty()) inputs.push_back(out.weight(conv_name + ".bias", {krsc[0]}, std::move(b)));
  const std::string conv_out = bn_name.empty() || fold ? y : y + ":conv";
  std::vector<onnx_export::Attribute> attributes = window_attributes(
      a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.pad_top, a.pad_left, a.pad_bottom, a.pad_right);
  // ONNX's defaults (dilation 1, one group) are left unwritten: a plain convolution's node stays as it was.
  if (a.dilation_h != 1 || a.dilation_w != 1)
    attributes.push_back(onnx_export::Attribute::integers("dilations", {a.dilation_h, a.dilation_w}));
  if (a.groups != 1) attributes.push_back(onnx_export::Attribute::integer("group", a.groups));
  out.node("Conv", std::move(inputs), conv_out, std::move(attributes));
  return bn_name.empty() || fold ? y : onnx_batch_norm(out, bn_name, bn, conv_out, y);
}

void conv_torch_params(const std::string& conv_name, bool bias, bool before_bn, std::vector<TorchParam>& params) {
  params.push_back(TorchParam::filter(conv_name + ".weight", before_bn && !bias));
  if (bias) params.push_back(TorchParam::as_is(conv_name + ".bias"));
}

void fused_conv_bn_torch_params(const Layer& l, std::vector<TorchParam>& params) {
  conv_torch_params(l.conv_name, false, true, params);
  batch_norm_torch_params(l.bn_name, params);
}

namespace {

// The BatchNorm layer that is convolution `layer`'s one consumer, or -1.
int batch_norm_after(const ExportedGraph& graph, int layer) {
  const std::vector<int>& consumers = graph.consumers[size_t(layer)];
  if (consumers.size() != 1) return -1;
  return graph.layers[size_t(consumers[0])].kind == LayerKind::BatchNorm ? consumers[0] : -1;
}

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  const int bn = out.fold_bn() ? batch_norm_after(out.graph(), layer) : -1;
  if (bn < 0 || out.layer(bn).out_shape.size() != 4) return onnx_conv_bn(out, l, l.name, "", BatchNormAttrs{}, out.input(layer), l.name);
  const Layer& norm = out.layer(bn);
  const std::string y =
      onnx_conv_bn(out, l, l.name, norm.name, attrs_of<BatchNormAttrs>(norm), out.input(layer), norm.name);
  out.absorb(bn, y);
  return y;
}

void torch_params(const ExportedGraph& graph, int layer, std::vector<TorchParam>& params) {
  const Layer& l = graph.layers[size_t(layer)];
  conv_torch_params(l.name, attrs_of<ConvAttrs>(l).bias, batch_norm_after(graph, layer) >= 0, params);
}

}  // namespace

extern const LayerExport kConvExport{LayerKind::Conv, onnx, torch_params};

}  // namespace kiln

// The BatchNorm layer's export. A BatchNorm that a convolution's export folds into its weights
// (OnnxExportOptions::fold_bn) is written there: its own export is then not called.
#include "ops/batchnorm/batchnorm_export.h"

#include "export/batch_norm_fold.h"

namespace kiln {

std::string onnx_batch_norm(OnnxLayerWriter& out, const std::string& bn, const BatchNormAttrs& attrs,
                            const std::string& x, const std::string& y) {
  export_layout::BatchNormValues v = export_layout::read_batch_norm(out.executable(), bn, attrs.eps);
  const Shape c = {int64_t(v.gamma.size())};
  return out.node("BatchNormalization",
                  {x, out.weight(bn + ".weight", c, std::move(v.gamma)), out.weight(bn + ".bias", c, std::move(v.beta)),
                   out.weight(bn + ".running_mean", c, std::move(v.mean)),
                   out.weight(bn + ".running_var", c, std::move(v.var))},
                  y,
                  {onnx_export::Attribute::real("epsilon", float(attrs.eps)),
                   // In double, rounded once: float32(1 - m) as PyTorch's exporter writes it.
                   onnx_export::Attribute::real("momentum", float(1.0 - attrs.momentum))});
}

void batch_norm_torch_params(const std::string& bn, std::vector<TorchParam>& params) {
  for (const char* field : {".weight", ".bias", ".running_mean", ".running_var"}) params.push_back(TorchParam::as_is(bn + field));
}

namespace {

std::string onnx(OnnxLayerWriter& out, int layer) {
  const Layer& l = out.layer(layer);
  return onnx_batch_norm(out, l.name, attrs_of<BatchNormAttrs>(l), out.input(layer), l.name);
}

void torch_params(const ExportedGraph& graph, int layer, std::vector<TorchParam>& params) {
  batch_norm_torch_params(graph.layers[size_t(layer)].name, params);
}

}  // namespace

extern const LayerExport kBatchNormExport{LayerKind::BatchNorm, onnx, torch_params};

}  // namespace kiln

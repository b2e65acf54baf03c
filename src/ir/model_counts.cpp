// kiln::count_model (kiln/program.h): parameters and multiply-adds, torchvision's way.
#include "kiln/program.h"

namespace kiln {

ModelCounts count_model(const Program& program) {
  ModelCounts counts;
  for (int id : program.params) counts.parameters += numel(program.tensors[size_t(id)].shape);
  const std::vector<Layer>& layers = program.graph.layers;
  for (const Layer& layer : layers) {
    if (layer.inputs.empty() || layer.out_shape.empty()) continue;
    const Shape& in = layers[size_t(layer.inputs[0])].out_shape;
    // Every output element of one image is one dot product: a convolution's over its filter's
    // R x S x C / groups taps, a linear layer's over its input's last dimension.
    const int64_t outputs = numel(layer.out_shape) / layer.out_shape[0];
    if (const ConvAttrs* conv = layer.attrs.find<ConvAttrs>())
      counts.multiply_adds += outputs * conv->kernel_h * conv->kernel_w * (in.back() / conv->groups);
    else if (layer.attrs.find<LinearAttrs>())
      counts.multiply_adds += outputs * in.back();
  }
  return counts;
}

}  // namespace kiln

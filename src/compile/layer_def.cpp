#include "compile/layer_def.h"

namespace kiln {

const LayerDef& layer_def(LayerKind kind) {
  for (const LayerDef* def : all_layer_defs())
    if (def->kind == kind) return *def;
  fail("internal: layer kind '{}' has no lowering", layer_kind_name(kind));
}

const Shape& single_input(const Layer& layer, const std::vector<Shape>& inputs) {
  if (inputs.size() != 1)
    fail("{} '{}': expects 1 input, got {}", layer_kind_name(layer.kind), layer.name, inputs.size());
  return inputs[0];
}

const Shape& single_nhwc_input(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  if (x.size() != 4)
    fail("{} '{}': needs a feature map (N,H,W,C) but its input is {}; move it before flatten/fc",
         layer_kind_name(layer.kind), layer.name, shape_str(x));
  return x;
}

int64_t window_output(const Layer& layer, int64_t size, int kernel, int stride, int padding, WindowPadding rule) {
  const char* kind = layer_kind_name(layer.kind);
  if (kernel <= 0) fail("{} '{}': kernel size must be positive, got {}", kind, layer.name, kernel);
  if (stride <= 0) fail("{} '{}': stride must be positive, got {}", kind, layer.name, stride);
  if (padding < 0) fail("{} '{}': padding must be >= 0, got {}", kind, layer.name, padding);
  if (rule == WindowPadding::AtMostHalfTheKernel && 2 * padding > kernel)
    fail("{} '{}': padding {} exceeds half the kernel {}; use padding <= {}", kind, layer.name,
         padding, kernel, kernel / 2);
  if (size + 2 * padding < kernel)
    fail("{} '{}': kernel {} is larger than its padded input ({} + 2*{}); use a smaller kernel, "
         "more padding or a larger input",
         kind, layer.name, kernel, size, padding);
  return (size + 2 * padding - kernel) / stride + 1;
}

Shape conv_output_shape(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_nhwc_input(layer, inputs);
  const LayerAttrs& a = layer.attrs;
  if (a.out_channels <= 0)
    fail("{} '{}': output channels must be positive, got {}", layer_kind_name(layer.kind), layer.name, a.out_channels);
  return {x[0], window_output(layer, x[1], a.kernel, a.stride, a.padding, WindowPadding::Any),
          window_output(layer, x[2], a.kernel, a.stride, a.padding, WindowPadding::Any), a.out_channels};
}

ConvBnParams declare_conv_bn_params(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const LayerAttrs& a = layer.attrs;
  const int64_t c = ctx.program.tensors[ctx.in(index, 0)].shape[3];
  const int64_t k = a.out_channels, rs = int64_t(a.kernel) * a.kernel;
  const Shape kc = {k};
  ConvBnParams p;
  // torchvision's ResNet/VGG init: Kaiming normal, fan_out, ReLU gain.
  p.weight = ctx.param(layer.conv_name + ".weight", {k, a.kernel, a.kernel, c}, Init::KaimingNormalFanOut, c * rs,
                       k * rs, /*compute_copy=*/true);
  p.w = ctx.compute_param(p.weight);
  p.gamma = ctx.param(layer.bn_name + ".weight", kc, Init::Ones);
  p.beta = ctx.param(layer.bn_name + ".bias", kc, Init::Zeros);
  p.running_mean = ctx.buffer(layer.bn_name + ".running_mean", kc, Init::Zeros);
  p.running_var = ctx.buffer(layer.bn_name + ".running_var", kc, Init::Ones);
  return p;
}

}  // namespace kiln

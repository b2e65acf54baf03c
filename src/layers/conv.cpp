#include "layers/layer_def.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) { return conv_output_shape(layer, inputs); }

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const LayerAttrs& a = layer.attrs;
  const int64_t c = ctx.program.tensors[ctx.in(index, 0)].shape[3];
  const int64_t k = a.out_channels, rs = int64_t(a.kernel) * a.kernel;
  // torchvision's ResNet/VGG init: Kaiming normal, fan_out, ReLU gain.
  const int w = ctx.param(layer.name + ".weight", {k, a.kernel, a.kernel, c}, Init::KaimingNormalFanOut,
                          c * rs, k * rs, /*compute_copy=*/true);
  const int b = a.bias ? ctx.param(layer.name + ".bias", {k}, Init::UniformFanIn, c * rs, k * rs) : -1;
  const int y = ctx.activation(layer.name, layer.out_shape);
  // In mixed precision the bias stays fp32, as cuDNN's bias input does.
  ctx.forward(ctx.op(OpKind::CONV_FWD, index, {ctx.in(index, 0), ctx.compute_param(w), b}, {y}));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(ctx.op(OpKind::CONV_FWD, index, {ctx.infer_in(index, 0), ctx.compute_param(w), b}, {yi}));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int dy = ctx.grad_out(index);
  const int w = ctx.program.find(layer.name + ".weight");
  const int b = ctx.program.find(layer.name + ".bias");
  ctx.backward(ctx.op(OpKind::CONV_WGRAD, index, {dy, ctx.in(index, 0)},
                      {ctx.compute_grad(w), b >= 0 ? ctx.grad_of(b) : -1}));
  const int dx = ctx.grad_in(index, 0);
  if (dx >= 0) ctx.backward(ctx.op(OpKind::CONV_DGRAD, index, {dy, ctx.compute_param(w)}, {dx}));
}

}  // namespace

extern const LayerDef kConvLayer{infer, lower_forward, lower_backward};

}  // namespace kiln

#include "layers/layer_def.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const float p = layer.attrs.p;
  if (!(p >= 0.f && p < 1.f)) fail("dropout '{}': probability must be in [0, 1), got {}", layer.name, p);
  return single_input(layer, inputs);
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int y = ctx.activation(layer.name, layer.out_shape);
  const int mask = ctx.activation(layer.name + ":mask", layer.out_shape, DType::U8);
  ctx.forward(ctx.op(OpKind::DROPOUT_FWD, index, {ctx.in(index, 0)}, {y, mask}));
  ctx.set_out(index, y);
  ctx.set_infer_out(index, ctx.infer_in(index, 0));  // identity in eval mode
}

void lower_backward(LowerContext& ctx, int index) {
  const int dx = ctx.grad_in(index, 0);
  if (dx < 0) return;
  const int mask = ctx.program.find(ctx.layer(index).name + ":mask");
  ctx.backward(ctx.op(OpKind::DROPOUT_BWD, index, {ctx.grad_out(index), mask}, {dx}));
}

}  // namespace

extern const LayerDef kDropoutLayer{infer, lower_forward, lower_backward};

}  // namespace kiln

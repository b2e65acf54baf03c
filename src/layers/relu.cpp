#include "layers/layer_def.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) { return single_input(layer, inputs); }

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int y = ctx.activation(layer.name, layer.out_shape);
  // One byte per element: the unfused reference path (CBR packs 8 per byte).
  const int mask = ctx.activation(layer.name + ":mask", layer.out_shape, DType::U8);
  ctx.forward(ctx.op(OpKind::RELU_FWD, index, {ctx.in(index, 0)}, {y, mask}));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(ctx.op(OpKind::RELU_INF, index, {ctx.infer_in(index, 0)}, {yi}));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  const int dx = ctx.grad_in(index, 0);
  if (dx < 0) return;
  const int mask = ctx.program.find(ctx.layer(index).name + ":mask");
  ctx.backward(ctx.op(OpKind::RELU_BWD, index, {ctx.grad_out(index), mask}, {dx}));
}

}  // namespace

extern const LayerDef kReluLayer{infer, lower_forward, lower_backward};

}  // namespace kiln

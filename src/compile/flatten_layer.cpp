// Flatten is free: NHWC memory already is (N, H*W*C) row-major, so output and gradient are
// views of their sources, no op is emitted.
#include "compile/layer_def.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  return {x[0], numel(x) / x[0]};
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  ctx.set_out(index, ctx.view(layer.name, layer.out_shape, ctx.in(index, 0)));
  ctx.set_infer_out(index, ctx.view(layer.name + ":inf", layer.out_shape, ctx.infer_in(index, 0)));
}

void lower_backward(LowerContext& ctx, int index) {
  if (ctx.input_is_data(index, 0)) return;
  const Layer& layer = ctx.layer(index);
  const Shape& in_shape = ctx.program.tensors[ctx.in(index, 0)].shape;
  ctx.set_grad_in(index, 0, ctx.view("d:" + layer.name + ":in", in_shape, ctx.grad_out(index)));
}

}  // namespace

extern const LayerDef kFlattenLayer{LayerKind::Flatten, infer, lower_forward, lower_backward};

}  // namespace kiln

// Residual add. Its backward is free: both inputs receive the output gradient itself.
#include "compile/layer_def.h"
#include "ops/elementwise/elementwise_contract.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  if (inputs.size() != 2) fail("add '{}': expects 2 inputs, got {}", layer.name, inputs.size());
  if (inputs[0] != inputs[1])
    fail("add '{}': shapes differ, its first input gives {} and its second {} (in a residual(): the body and the "
         "shortcut); make them equal, e.g. give the shortcut a projection (a 1x1 conv with the body's stride and "
         "channels)",
         layer.name, shape_str(inputs[0]), shape_str(inputs[1]));
  return inputs[0];
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(make_op(Add<TensorId>{ctx.in(index, 0), ctx.in(index, 1), y}, index));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(Add<TensorId>{ctx.infer_in(index, 0), ctx.infer_in(index, 1), yi}, index));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  const int dy = ctx.grad_out(index);
  ctx.set_grad_in(index, 0, dy);
  ctx.set_grad_in(index, 1, dy);
}

}  // namespace

extern const LayerDef kAddLayer{LayerKind::Add, infer, lower_forward, lower_backward};

}  // namespace kiln

#include "compile/layer_def.h"
#include "ops/elementwise/elementwise_contract.h"
#include "ops/elementwise/layer_key.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) { return single_input(layer, inputs); }

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  DropoutForward<TensorId> fwd;
  fwd.x = ctx.in(index, 0);
  fwd.y = ctx.activation(layer.name, layer.out_shape);
  fwd.mask = ctx.activation(layer.name + ":mask", layer.out_shape, DType::U8);
  fwd.p = attrs_of<DropoutAttrs>(layer).p;
  fwd.layer_key = layer_key(layer.name);
  ctx.forward(make_op(fwd, index));
  ctx.save(index, fwd);
  ctx.set_out(index, fwd.y);
  ctx.set_infer_out(index, ctx.infer_in(index, 0));  // identity in eval mode
}

void lower_backward(LowerContext& ctx, int index) {
  const int dx = ctx.grad_in(index, 0);
  if (dx < 0) return;
  const auto& f = ctx.saved<DropoutForward<TensorId>>(index);
  DropoutBackward<TensorId> bwd;
  bwd.dy = ctx.grad_out(index), bwd.mask = f.mask, bwd.dx = dx, bwd.p = f.p;
  ctx.backward(make_op(bwd, index));
}

}  // namespace

extern const LayerDef kDropoutLayer{LayerKind::Dropout, infer, lower_forward, lower_backward};

}  // namespace kiln

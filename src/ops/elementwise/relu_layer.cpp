#include "compile/layer_def.h"
#include "ops/elementwise/elementwise_contract.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) { return single_input(layer, inputs); }

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  ReluForward<TensorId> fwd;
  fwd.x = ctx.in(index, 0);
  fwd.y = ctx.activation(layer.name, layer.out_shape);
  // One byte per element: the unfused reference path (CBR packs 8 per byte).
  fwd.mask = ctx.activation(layer.name + ":mask", layer.out_shape, DType::U8);
  ctx.forward(make_op(fwd, index));
  ctx.save(index, fwd);
  ctx.set_out(index, fwd.y);
  ReluInference<TensorId> inf;
  inf.x = ctx.infer_in(index, 0);
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

void lower_backward(LowerContext& ctx, int index) {
  const int dx = ctx.grad_in(index, 0);
  if (dx < 0) return;
  const auto& f = ctx.saved<ReluForward<TensorId>>(index);
  ctx.backward(make_op(ReluBackward<TensorId>{ctx.grad_out(index), f.mask, dx}, index));
}

}  // namespace

extern const LayerDef kReluLayer{LayerKind::ReLU, infer, lower_forward, lower_backward};

}  // namespace kiln

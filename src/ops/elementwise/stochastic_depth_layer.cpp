// Stochastic depth, torchvision's StochasticDepth(p, "row") (EfficientNet, ConvNeXt, Swin): in
// training each sample keeps its whole input, scaled by 1 / (1 - p), or is zeroed (one
// STOCHASTIC_DEPTH_FWD, which draws the per-sample mask from the step's seed as dropout draws its
// own, and one STOCHASTIC_DEPTH_BWD). In inference, and in training with p = 0 (torchvision returns
// its input then), it is the identity and emits no op.
#include "compile/layer_def.h"
#include "ops/elementwise/elementwise_contract.h"
#include "ops/elementwise/layer_key.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) { return single_input(layer, inputs); }

bool is_identity(const Layer& layer) { return attrs_of<StochasticDepthAttrs>(layer).p == 0; }

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  ctx.set_infer_out(index, ctx.infer_in(index, 0));  // identity in eval mode, as dropout
  if (is_identity(layer)) {  // its output is its input under the layer's name, as flatten's
    ctx.set_out(index, ctx.view(layer.name, layer.out_shape, ctx.in(index, 0)));
    return;
  }
  StochasticDepthForward<TensorId> fwd;
  fwd.x = ctx.in(index, 0);
  fwd.y = ctx.activation(layer.name, layer.out_shape);
  fwd.mask = ctx.activation(layer.name + ":mask", {layer.out_shape.at(0)}, DType::U8);
  fwd.p = attrs_of<StochasticDepthAttrs>(layer).p;
  fwd.layer_key = layer_key(layer.name);
  ctx.forward(make_op(fwd, index));
  ctx.save(index, fwd);
  ctx.set_out(index, fwd.y);
}

void lower_backward(LowerContext& ctx, int index) {
  if (ctx.input_is_data(index, 0)) return;
  if (is_identity(ctx.layer(index))) {  // the input's gradient is the output's
    ctx.set_grad_in(index, 0, ctx.grad_out(index));
    return;
  }
  const auto& f = ctx.saved<StochasticDepthForward<TensorId>>(index);
  StochasticDepthBackward<TensorId> bwd;
  bwd.dy = ctx.grad_out(index), bwd.mask = f.mask, bwd.dx = ctx.grad_in(index, 0), bwd.p = f.p;
  ctx.backward(make_op(bwd, index));
}

}  // namespace

extern const LayerDef kStochasticDepthLayer{LayerKind::StochasticDepth, infer, lower_forward, lower_backward};

}  // namespace kiln

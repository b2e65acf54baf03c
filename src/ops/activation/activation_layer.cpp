// An elementwise activation layer (kiln::Activation): any input shape; its backward needs the
// forward's input.
#include "compile/layer_def.h"
#include "ops/activation/activation_contract.h"
#include "ops/activation/activation_functions.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  // ActivationAttrs::check took the enumerator; what alpha may be is each function's, in the list.
  const ActivationAttrs& a = attrs_of<ActivationAttrs>(layer);
  const activation::Info& info = activation::info(a.activation);
  if (info.alpha == activation::AlphaRule::AboveZero && !(a.alpha > 0))
    fail("{} '{}': alpha must be positive, got {}", info.name, layer.name, a.alpha);
  if (info.alpha == activation::AlphaRule::AtLeastZero && !(a.alpha >= 0))
    fail("{} '{}': alpha (the negative slope) must be >= 0, got {}", info.name, layer.name, a.alpha);
  return single_input(layer, inputs);
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  ActivationForward<TensorId> f;
  f.x = ctx.in(index, 0), f.y = ctx.activation(layer.name, layer.out_shape);
  const ActivationAttrs& a = attrs_of<ActivationAttrs>(layer);
  f.function = a.activation, f.alpha = a.alpha;
  ctx.forward(make_op(f, index));
  ctx.set_out(index, f.y);
  ctx.save(index, f);
  ActivationInference<TensorId> i;
  i.x = ctx.infer_in(index, 0), i.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  i.function = f.function, i.alpha = f.alpha;
  ctx.inference(make_op(i, index));
  ctx.set_infer_out(index, i.y);
}

void lower_backward(LowerContext& ctx, int index) {
  const int dx = ctx.grad_in(index, 0);
  if (dx < 0) return;
  const auto& f = ctx.saved<ActivationForward<TensorId>>(index);
  ActivationBackward<TensorId> b;
  b.dy = ctx.grad_out(index), b.x = f.x, b.dx = dx, b.function = f.function, b.alpha = f.alpha;
  ctx.backward(make_op(b, index));
}

}  // namespace

extern const LayerDef kActivationLayer{LayerKind::Activation, infer, lower_forward, lower_backward};

}  // namespace kiln

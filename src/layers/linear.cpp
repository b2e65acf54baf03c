#include "layers/layer_def.h"
#include "ops/linear/linear_contract.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  if (x.size() != 2)
    fail("fc '{}': needs a flat input (N,F) but gets {}; add flatten() or global_avgpool() before it",
         layer.name, shape_str(x));
  if (layer.attrs.out_channels <= 0)
    fail("fc '{}': output features must be positive, got {}", layer.name, layer.attrs.out_channels);
  return {x[0], layer.attrs.out_channels};
}

// Weight (out, in) and PyTorch's default nn.Linear init: U(-1/sqrt(in), 1/sqrt(in)).
void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int64_t f = ctx.program.tensors[ctx.in(index, 0)].shape[1];
  const int64_t o = layer.attrs.out_channels;
  LinearForward<TensorId> fwd;
  fwd.x = ctx.in(index, 0);
  fwd.w = ctx.param(layer.name + ".weight", {o, f}, Init::UniformFanIn, f, o);
  fwd.bias = layer.attrs.bias ? ctx.param(layer.name + ".bias", {o}, Init::UniformFanIn, f, o) : -1;
  fwd.y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(make_op(fwd, index));
  ctx.set_out(index, fwd.y);
  ctx.save(index, fwd);

  LinearForward<TensorId> inf = fwd;
  inf.x = ctx.infer_in(index, 0);
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

void lower_backward(LowerContext& ctx, int index) {
  const auto& f = ctx.saved<LinearForward<TensorId>>(index);
  LinearBackward<TensorId> bwd;
  bwd.dy = ctx.grad_out(index), bwd.x = f.x, bwd.w = f.w;
  bwd.dx = ctx.grad_in(index, 0);
  bwd.dw = ctx.grad_of(f.w);
  bwd.dbias = f.bias.present() ? TensorId(ctx.grad_of(f.bias)) : TensorId();
  ctx.backward(make_op(bwd, index));
}

}  // namespace

extern const LayerDef kLinearLayer{LayerKind::Linear, infer, lower_forward, lower_backward};

}  // namespace kiln

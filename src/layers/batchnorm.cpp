#include "layers/layer_def.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  if (x.size() != 4 && x.size() != 2)
    fail("bn '{}': input must be (N,H,W,C) or (N,F), got {}", layer.name, shape_str(x));
  if (layer.attrs.eps <= 0) fail("bn '{}': eps must be positive, got {}", layer.name, layer.attrs.eps);
  if (layer.attrs.momentum < 0 || layer.attrs.momentum > 1)
    fail("bn '{}': momentum must be in [0, 1], got {}", layer.name, layer.attrs.momentum);
  return x;
}

// Tensor names follow PyTorch's BatchNorm2d: weight (gamma), bias (beta), running_mean/var.
void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const Shape c = {layer.out_shape.back()};
  const int gamma = ctx.param(layer.name + ".weight", c, Init::Ones);
  const int beta = ctx.param(layer.name + ".bias", c, Init::Zeros);
  const int rmean = ctx.buffer(layer.name + ".running_mean", c, Init::Zeros);
  const int rvar = ctx.buffer(layer.name + ".running_var", c, Init::Ones);
  const int y = ctx.activation(layer.name, layer.out_shape);
  const int mean = ctx.activation(layer.name + ":saved_mean", c, ctx.param_dtype);
  const int inv_std = ctx.activation(layer.name + ":saved_inv_std", c, ctx.param_dtype);
  ctx.forward(ctx.op(OpKind::BN_FWD_TRAIN, index, {ctx.in(index, 0), gamma, beta},
                     {y, mean, inv_std, rmean, rvar}));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(ctx.op(OpKind::BN_INF, index, {ctx.infer_in(index, 0), gamma, beta, rmean, rvar}, {yi}));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const Program& p = ctx.program;
  const int gamma = p.find(layer.name + ".weight"), beta = p.find(layer.name + ".bias");
  int dx = ctx.grad_in(index, 0);
  // BN straight on the data batch still trains gamma/beta; its dX goes to a scratch tensor.
  if (dx < 0) dx = ctx.activation(layer.name + ":unused_dx", layer.out_shape);
  ctx.backward(ctx.op(OpKind::BN_BWD, index,
                      {ctx.grad_out(index), ctx.in(index, 0), gamma, p.find(layer.name + ":saved_mean"),
                       p.find(layer.name + ":saved_inv_std")},
                      {dx, ctx.grad_of(gamma), ctx.grad_of(beta)}));
}

}  // namespace

extern const LayerDef kBatchNormLayer{infer, lower_forward, lower_backward};

}  // namespace kiln

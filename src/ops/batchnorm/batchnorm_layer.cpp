#include "compile/layer_def.h"
#include "ops/batchnorm/batchnorm_contract.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  if (x.size() != 4 && x.size() != 2)
    fail("bn '{}': input must be (N,H,W,C) or (N,F), got {}", layer.name, shape_str(x));
  return x;
}

// Tensor names follow PyTorch's BatchNorm2d: weight (gamma), bias (beta), running_mean/var.
void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const Shape c = {layer.out_shape.back()};
  BnForwardTrain<TensorId> f;
  f.x = ctx.in(index, 0);
  f.gamma = ctx.param(layer.name + ".weight", c, Init::Ones);
  f.beta = ctx.param(layer.name + ".bias", c, Init::Zeros);
  f.running_mean = ctx.buffer(layer.name + ".running_mean", c, Init::Zeros);
  f.running_var = ctx.buffer(layer.name + ".running_var", c, Init::Ones);
  f.y = ctx.activation(layer.name, layer.out_shape);
  f.saved_mean = ctx.activation(layer.name + ":saved_mean", c, ctx.param_dtype);
  f.saved_inv_std = ctx.activation(layer.name + ":saved_inv_std", c, ctx.param_dtype);
  const BatchNormAttrs& a = attrs_of<BatchNormAttrs>(layer);
  f.eps = a.eps, f.momentum = a.momentum;
  ctx.forward(make_op(f, index));
  ctx.set_out(index, f.y);
  ctx.save(index, f);

  BnInference<TensorId> inf;
  inf.x = ctx.infer_in(index, 0);
  inf.gamma = f.gamma, inf.beta = f.beta, inf.running_mean = f.running_mean, inf.running_var = f.running_var;
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  inf.eps = f.eps;
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const auto& f = ctx.saved<BnForwardTrain<TensorId>>(index);
  BnBackward<TensorId> b;
  b.dx = ctx.grad_in(index, 0);
  // BN straight on the data batch still trains gamma/beta; its dX goes to a scratch tensor.
  if (!b.dx.present()) b.dx = ctx.activation(layer.name + ":unused_dx", layer.out_shape);
  b.dy = ctx.grad_out(index);
  b.x = f.x, b.gamma = f.gamma, b.saved_mean = f.saved_mean, b.saved_inv_std = f.saved_inv_std;
  b.dgamma = ctx.grad_of(f.gamma), b.dbeta = ctx.grad_of(f.beta);
  ctx.backward(make_op(b, index));
}

}  // namespace

extern const LayerDef kBatchNormLayer{LayerKind::BatchNorm, infer, lower_forward, lower_backward};

}  // namespace kiln

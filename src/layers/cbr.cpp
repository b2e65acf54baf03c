#include "layers/layer_def.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  if (layer.attrs.eps <= 0) fail("cbr '{}': eps must be positive, got {}", layer.name, layer.attrs.eps);
  return conv_output_shape(layer, inputs);
}

struct CbrTensors {
  int w, w_compute, gamma, beta, rmean, rvar;
};

CbrTensors named_params(const LowerContext& ctx, const Layer& layer) {
  const Program& p = ctx.program;
  const int w = p.find(layer.conv_name + ".weight");
  return {w, ctx.compute_param(w), p.find(layer.bn_name + ".weight"), p.find(layer.bn_name + ".bias"),
          p.find(layer.bn_name + ".running_mean"), p.find(layer.bn_name + ".running_var")};
}

// One fused operator with all its tensors fixed up front (CBR.md): the conv output and batch
// statistics are kept for backward, the ReLU mask is packed 8 elements per byte.
void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const LayerAttrs& a = layer.attrs;
  const int64_t c = ctx.program.tensors[ctx.in(index, 0)].shape[3];
  const int64_t k = a.out_channels, rs = int64_t(a.kernel) * a.kernel;
  const Shape kc = {k};
  ctx.param(layer.conv_name + ".weight", {k, a.kernel, a.kernel, c}, Init::KaimingNormalFanOut, c * rs, k * rs,
            /*compute_copy=*/true);
  ctx.param(layer.bn_name + ".weight", kc, Init::Ones);
  ctx.param(layer.bn_name + ".bias", kc, Init::Zeros);
  ctx.buffer(layer.bn_name + ".running_mean", kc, Init::Zeros);
  ctx.buffer(layer.bn_name + ".running_var", kc, Init::Ones);
  const CbrTensors t = named_params(ctx, layer);

  const int conv_out = ctx.activation(layer.name + ":conv_out", layer.out_shape);
  const int y = ctx.activation(layer.name, layer.out_shape);
  const int mean = ctx.activation(layer.name + ":saved_mean", kc, ctx.param_dtype);
  const int inv_std = ctx.activation(layer.name + ":saved_inv_std", kc, ctx.param_dtype);
  const int bitmask = ctx.activation(layer.name + ":bitmask", {(numel(layer.out_shape) + 7) / 8}, DType::U8);
  ctx.forward(ctx.op(OpKind::CBR_FWD, index, {ctx.in(index, 0), t.w_compute, t.gamma, t.beta},
                     {conv_out, y, mean, inv_std, bitmask, t.rmean, t.rvar}));
  ctx.set_out(index, y);

  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(ctx.op(OpKind::CBR_INF, index,
                       {ctx.infer_in(index, 0), t.w_compute, t.gamma, t.beta, t.rmean, t.rvar}, {yi}));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const Program& p = ctx.program;
  const CbrTensors t = named_params(ctx, layer);
  const int dconv = ctx.activation(layer.name + ":dconv", layer.out_shape);
  const int dx = ctx.grad_in(index, 0);
  // The network's first layer reads the data batch: no dX, so dgrad is skipped entirely.
  const OpKind kind = dx < 0 ? OpKind::CBR_BWD_FIRST : OpKind::CBR_BWD;
  ctx.backward(ctx.op(kind, index,
                      {ctx.grad_out(index), p.find(layer.name + ":bitmask"), p.find(layer.name + ":conv_out"),
                       ctx.in(index, 0), t.w_compute, t.gamma, p.find(layer.name + ":saved_mean"),
                       p.find(layer.name + ":saved_inv_std")},
                      {dx, ctx.compute_grad(t.w), ctx.grad_of(t.gamma), ctx.grad_of(t.beta), dconv}));
}

}  // namespace

extern const LayerDef kCbrLayer{infer, lower_forward, lower_backward};

}  // namespace kiln

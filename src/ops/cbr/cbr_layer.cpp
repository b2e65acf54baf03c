#include "compile/layer_def.h"
#include "compile/seam_input.h"

#include <utility>

#include "ops/cbr/cbr_contract.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  require_fusable_window(layer);
  return conv_output_shape(layer, inputs);
}

// What the backward lowering takes from the forward's: its op and the master conv weight (the
// forward reads the weight's compute copy; the gradient goes to the weight's own).
struct CbrSaved {
  CbrForward<TensorId> fwd;
  TensorId weight;
};

// One fused operator with all its tensors fixed up front (docs/cbr.md): the conv output and batch
// statistics are kept for backward, the ReLU mask is packed 8 elements per byte.
void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const ConvBnAttrs& a = attrs_of<ConvBnAttrs>(layer);
  const Shape kc = {a.conv.out_channels};
  const ConvBnParams p = declare_conv_bn_params(ctx, index);
  CbrForward<TensorId> f;
  lower_seam_input(ctx, index, f);  // a seam's consumer: the producer's conv_out, its BN + ReLU applied here
  f.w = p.w, f.gamma = p.gamma, f.beta = p.beta, f.running_mean = p.running_mean, f.running_var = p.running_var;
  f.conv_out = ctx.activation(layer.name + ":conv_out", layer.out_shape);
  f.saved_mean = ctx.activation(layer.name + ":saved_mean", kc, ctx.param_dtype);
  f.saved_inv_std = ctx.activation(layer.name + ":saved_inv_std", kc, ctx.param_dtype);
  if (layer.marks.seam_out) {  // no output of its own: its consumers apply scale and shift to conv_out
    f.scale = ctx.activation(layer.name + ":scale", kc, ctx.param_dtype);
    f.shift = ctx.activation(layer.name + ":shift", kc, ctx.param_dtype);
  } else {
    f.y = ctx.activation(layer.name, layer.out_shape);
    f.bitmask = ctx.activation(layer.name + ":bitmask", {(numel(layer.out_shape) + 7) / 8}, DType::U8);
  }
  // Square windows padded alike on every side (require_fusable_window refused any other).
  f.stride = a.conv.stride_h, f.padding = a.conv.pad_top, f.eps = a.bn.eps, f.momentum = a.bn.momentum;
  ctx.forward(make_op(f, index));
  // A seam's consumers read conv_out, with scale and shift.
  ctx.set_out(index, layer.marks.seam_out ? f.conv_out : f.y);
  if (layer.marks.seam_out) ctx.set_seam_output(index, {f.conv_out, f.scale, f.shift});
  ctx.save(index, CbrSaved{f, p.weight});

  CbrInference<TensorId> inf;
  inf.x = ctx.infer_in(index, 0);
  inf.w = f.w, inf.gamma = f.gamma, inf.beta = f.beta, inf.running_mean = f.running_mean;
  inf.running_var = f.running_var;
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  inf.stride = f.stride, inf.padding = f.padding, inf.eps = f.eps;
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const CbrSaved& saved = ctx.saved<CbrSaved>(index);
  const CbrForward<TensorId>& f = saved.fwd;
  CbrBackward<TensorId> b;
  b.dconv = ctx.activation(layer.name + ":dconv", layer.out_shape);
  b.dx = ctx.grad_in(index, 0);
  b.dy = ctx.grad_out(index);
  b.bitmask = f.bitmask, b.conv_out = f.conv_out, b.w = f.w, b.gamma = f.gamma;
  b.saved_mean = f.saved_mean, b.saved_inv_std = f.saved_inv_std;
  b.scale = f.scale, b.shift = f.shift;  // a seam's producer: the mask is recomputed from them
  lower_seam_input_backward(ctx, index, f, b);
  b.dw = ctx.grad_of(saved.weight), b.dgamma = ctx.grad_of(f.gamma), b.dbeta = ctx.grad_of(f.beta);
  b.stride = f.stride, b.padding = f.padding;
  Op op = make_op(b, index);
  // The network's first layer reads the data batch: no dX, so dgrad is skipped entirely.
  if (!b.dx.present()) op.kind = OpKind::CBR_BWD_FIRST;
  ctx.backward(std::move(op));
}

}  // namespace

extern const LayerDef kCbrLayer{LayerKind::CBR, infer, lower_forward, lower_backward};

}  // namespace kiln

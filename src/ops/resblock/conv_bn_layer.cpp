// Conv -> BatchNorm at a ResNet block end (src/ops/resblock/): the convolution with its batch
// statistics; the normalization itself is applied by the one consumer, a bn_add_relu layer, in
// its pass. So this layer's output tensor is the convolution's output, and the gradient it
// receives is that of the convolution's output (BN's backward runs in the consumer's op).
#include "ops/resblock/conv_bn_layer.h"

#include "compile/seam_input.h"
#include "ir/fused_layer_kinds.h"
#include "ops/resblock/resblock_contract.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  require_fusable_window(layer);
  return conv_output_shape(layer, inputs);
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const ConvBnAttrs& a = attrs_of<ConvBnAttrs>(layer);  // the Conv's and the BatchNorm's it was fused from
  const Shape kc = {a.conv.out_channels};
  const ConvBnParams p = declare_conv_bn_params(ctx, index);
  ConvBnSaved s;
  s.weight = p.weight;
  ConvBnForward<TensorId>& f = s.fwd;
  lower_seam_input(ctx, index, f);  // a seam's consumer: a CBR's conv_out, its BN + ReLU applied here
  f.w = p.w, f.gamma = p.gamma, f.beta = p.beta, f.running_mean = p.running_mean, f.running_var = p.running_var;
  f.conv_out = ctx.activation(layer.name + ":conv_out", layer.out_shape);
  f.saved_mean = ctx.activation(layer.name + ":saved_mean", kc, ctx.param_dtype);
  f.saved_inv_std = ctx.activation(layer.name + ":saved_inv_std", kc, ctx.param_dtype);
  f.scale = ctx.activation(layer.name + ":scale", kc, ctx.param_dtype);
  f.shift = ctx.activation(layer.name + ":shift", kc, ctx.param_dtype);
  // Square windows padded alike on every side (require_fusable_window refused any other).
  f.stride = a.conv.stride_h, f.padding = a.conv.pad_top, f.eps = a.bn.eps, f.momentum = a.bn.momentum;
  ctx.forward(make_op(f, index));
  ctx.set_out(index, f.conv_out);

  ConvBnInference<TensorId>& inf = s.inf;
  inf.x = ctx.infer_in(index, 0);
  inf.w = f.w, inf.gamma = f.gamma, inf.beta = f.beta, inf.running_mean = f.running_mean;
  inf.running_var = f.running_var;
  inf.conv_out = ctx.activation(layer.name + ":conv_out:inf", layer.out_shape);
  inf.scale = ctx.activation(layer.name + ":scale:inf", kc, ctx.param_dtype);
  inf.shift = ctx.activation(layer.name + ":shift:inf", kc, ctx.param_dtype);
  inf.stride = f.stride, inf.padding = f.padding, inf.eps = f.eps;
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.conv_out);
  ctx.save(index, s);
}

void lower_backward(LowerContext& ctx, int index) {
  const ConvBnSaved& s = ctx.saved<ConvBnSaved>(index);
  ConvBnBackward<TensorId> b;
  b.dconv = ctx.grad_out(index);
  b.w = s.fwd.w;
  lower_seam_input_backward(ctx, index, s.fwd, b);
  b.dw = ctx.grad_of(s.weight);
  b.dx = ctx.grad_in(index, 0);  // absent for a convolution of the data batch
  b.stride = s.fwd.stride, b.padding = s.fwd.padding;
  ctx.backward(make_op(b, index));
}

}  // namespace

extern const LayerDef kConvBnLayer{fused_layer::ConvBN, infer, lower_forward, lower_backward};

}  // namespace kiln

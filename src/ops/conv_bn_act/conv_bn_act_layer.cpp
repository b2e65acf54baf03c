// Conv -> BatchNorm -> activation as one layer (a fusion's: src/compile/passes.cpp), for every
// convolution window (groups, depthwise, dilation, rectangular kernels and strides, asymmetric
// padding) and every activation (ReLU and activation_list.def's), where the CBR layer takes
// square, ungrouped windows and ReLU. The convolution runs as the Conv layer's ops (oneDNN or cuDNN,
// tuned alike); the BatchNorm and the activation are one op over its output (conv_bn_act_contract.h),
// so the BatchNorm's output is never written: the forward keeps the convolution's output and the
// layer's, where the three layers kept three tensors, and the backward recomputes the
// pre-activation from the convolution's output and the kept per-channel scale and shift.
// Tensor names are the unfused layers' (<conv>.weight, <bn>.running_var, ...), so checkpoints and
// torchvision's weights move between fused and unfused programs.
#include <optional>
#include <vector>

#include "compile/layer_def.h"
#include "ops/conv/conv_contract.h"
#include "ops/conv_bn_act/bn_act_functions.h"
#include "ops/conv_bn_act/conv_bn_act_contract.h"
#include "ops/mul/mul_contract.h"
#include "ops/pool/pool_contract.h"
#include "runtime/op_cost.h"
#include "ir/fused_layer_kinds.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) { return conv_output_shape(layer, inputs); }

struct ConvBnActSaved {
  ConvForward<TensorId> conv;
  BnActForward<TensorId> bn_act;
  TensorId weight;  // the master weight: its gradient goes there
};

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const ConvBnActAttrs& a = attrs_of<ConvBnActAttrs>(layer);
  const Shape kc = {a.conv.out_channels};
  const ConvBnParams p = declare_conv_bn_params(ctx, index);
  ConvBnActSaved s;
  s.weight = p.weight;
  ConvForward<TensorId>& conv = s.conv;
  conv.x = ctx.in(index, 0), conv.w = p.w;
  conv.y = ctx.activation(layer.name + ":conv_out", layer.out_shape);
  conv.window = conv_window(a.conv);
  ctx.forward(make_op(conv, index));

  BnActForward<TensorId>& f = s.bn_act;
  f.x = conv.y, f.gamma = p.gamma, f.beta = p.beta, f.running_mean = p.running_mean, f.running_var = p.running_var;
  f.y = ctx.activation(layer.name, layer.out_shape);
  f.saved_mean = ctx.activation(layer.name + ":saved_mean", kc, ctx.param_dtype);
  f.saved_inv_std = ctx.activation(layer.name + ":saved_inv_std", kc, ctx.param_dtype);
  f.scale = ctx.activation(layer.name + ":scale", kc, ctx.param_dtype);
  f.shift = ctx.activation(layer.name + ":shift", kc, ctx.param_dtype);
  f.activation = a.relu ? bn_act::kReluCode : int(a.act.activation), f.alpha = a.relu ? 0.f : a.act.alpha;
  f.eps = a.bn.eps, f.momentum = a.bn.momentum;
  ctx.forward(make_op(f, index));
  ctx.set_out(index, f.y);
  ctx.save(index, s);

  ConvForward<TensorId> conv_inf = conv;
  conv_inf.x = ctx.infer_in(index, 0);
  conv_inf.y = ctx.activation(layer.name + ":conv_out:inf", layer.out_shape);
  ctx.inference(make_op(conv_inf, index));
  BnActInference<TensorId> inf;
  inf.x = conv_inf.y, inf.gamma = f.gamma, inf.beta = f.beta, inf.running_mean = f.running_mean;
  inf.running_var = f.running_var;
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  inf.activation = f.activation, inf.alpha = f.alpha, inf.eps = f.eps;
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

// The gradient of y into b (dy, and the per-sample terms of a squeeze-and-excitation block). Where y
// has two readers, a global average pool and a multiply of y by an N x 1 x 1 x C gate (an SE
// block), their backward ops are taken into BN_ACT_BWD (conv_bn_act_contract.h):
//  - the pool's GAP_BWD, which wrote its gradient broadcast to y's size, and the GRAD_SUM that
//    added it, go; BN_ACT_BWD reads the pool's N x C gradient as dy_pooled;
//  - the multiply's MUL_BWD, which wrote y's gradient dy * gate and summed the gate's from dy and y,
//    becomes BN_ACT_GATE_GRAD in its place, summing the gate's from dy and the convolution's output;
//    BN_ACT_BWD reads the multiply's dy and the gate.
// No backward op then reads y, so the forward need not keep it; y's gradient is never written.
// Passes over a tensor of y's size, backward: 5 written or read fewer.
//
// On the GPU only: on the CPU, where the activations' arithmetic rather than memory bounds these
// layers, the fold made EfficientNet-B0's step 10-30% slower on 2 cores (docs/results.md), so there
// the pool and the multiply keep their own backward ops.
void route_output_gradient(LowerContext& ctx, int index, const ConvBnActSaved& s, BnActBackward<TensorId>& b) {
  if (ctx.program.options.device != Device::CUDA) {
    b.dy = ctx.grad_out(index);
    return;
  }
  const std::vector<int> terms = ctx.grad_out_terms(index, 2);
  if (terms.size() == 1) {
    b.dy = terms[0];
    return;
  }
  for (size_t i : {0, 1}) {
    std::optional<Op> gap = ctx.take_backward_op(OpKind::GAP_BWD, terms[i]);
    if (!gap) continue;
    b.dy_pooled = op_fields<GlobalAvgPoolBackward>(*gap).dy;
    b.dy = terms[1 - i];
    Op* mul = ctx.backward_op_writing(OpKind::MUL_BWD, terms[1 - i]);
    if (!mul) return;
    const MulBackward<TensorId> m = op_fields<MulBackward>(*mul);
    const Shape& gate = ctx.program.tensors[size_t(m.b.id)].shape;
    const Shape& y = ctx.program.tensors[size_t(s.bn_act.y.id)].shape;
    if (m.a != s.bn_act.y || gate != Shape{y[0], 1, 1, y[3]}) return;
    b.dy = m.dy, b.gate = m.b;
    if (!m.db.present()) {  // a gate with no gradient wanted: the multiply's backward goes whole
      ctx.take_backward_op(OpKind::MUL_BWD, terms[1 - i]);
      return;
    }
    BnActGateGrad<TensorId> gate_grad;
    gate_grad.dy = m.dy, gate_grad.x = s.bn_act.x, gate_grad.scale = s.bn_act.scale, gate_grad.shift = s.bn_act.shift;
    gate_grad.db = m.db, gate_grad.activation = s.bn_act.activation, gate_grad.alpha = s.bn_act.alpha;
    *mul = make_op(gate_grad, index);
    return;
  }
  b.dy = ctx.grad_out(index);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const ConvBnActSaved& s = ctx.saved<ConvBnActSaved>(index);
  const BnActForward<TensorId>& f = s.bn_act;
  BnActBackward<TensorId> b;
  route_output_gradient(ctx, index, s, b);
  b.x = f.x, b.gamma = f.gamma, b.saved_mean = f.saved_mean, b.saved_inv_std = f.saved_inv_std;
  b.scale = f.scale, b.shift = f.shift;
  b.dx = ctx.activation(layer.name + ":dconv", layer.out_shape);
  b.dgamma = ctx.grad_of(f.gamma), b.dbeta = ctx.grad_of(f.beta);
  b.activation = f.activation, b.alpha = f.alpha;
  ctx.backward(make_op(b, index));

  ConvWgrad<TensorId> wgrad;
  wgrad.dy = b.dx, wgrad.x = s.conv.x, wgrad.dw = ctx.grad_of(s.weight), wgrad.window = s.conv.window;
  ctx.backward(make_op(wgrad, index));
  const int dx = ctx.grad_in(index, 0);  // none for a convolution of the data batch
  if (dx >= 0) {
    ConvDgrad<TensorId> dgrad;
    dgrad.dy = b.dx, dgrad.w = s.conv.w, dgrad.dx = dx, dgrad.window = s.conv.window;
    ctx.backward(make_op(dgrad, index));
  }
}

}  // namespace

extern const LayerDef kConvBnActLayer{fused_layer::ConvBnAct, infer, lower_forward, lower_backward};

}  // namespace kiln

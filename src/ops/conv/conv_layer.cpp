#include "compile/layer_def.h"
#include "ops/conv/conv_contract.h"

namespace kiln {
namespace {

// What the backward lowering needs from forward: the training forward op and the weight
// parameter itself (the op reads its compute copy in mixed precision; gradients go to the
// parameter's).
struct ConvSaved {
  ConvForward<TensorId> fwd;
  TensorId weight;
};

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) { return conv_output_shape(layer, inputs); }

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const ConvAttrs& a = attrs_of<ConvAttrs>(layer);
  // Each filter reads its group's C / groups input channels (PyTorch's (K, C/groups, R, S) weight,
  // KRSC here), which are also its fan-in; the fan-out is K x R x S, as torch.nn.init counts it.
  const int64_t c = ctx.program.tensors[ctx.in(index, 0)].shape[3] / a.groups;
  const int64_t k = a.out_channels, rs = int64_t(a.kernel_h) * a.kernel_w;
  // The family's weight and bias initializers (torchvision's).
  const int w = weight_param(ctx, layer.name + ".weight", {k, a.kernel_h, a.kernel_w, c}, a.init, c * rs, k * rs,
                             /*compute_copy=*/true);
  const int b = a.bias ? bias_param(ctx, layer.name + ".bias", {k}, a.bias_init, c * rs, /*compute_copy=*/false) : -1;
  ConvForward<TensorId> fwd;
  fwd.x = ctx.in(index, 0), fwd.w = ctx.compute_param(w);
  fwd.bias = b;  // in mixed precision the bias stays fp32, as cuDNN's bias input does
  fwd.y = ctx.activation(layer.name, layer.out_shape);
  fwd.window = conv_window(a);
  ctx.forward(make_op(fwd, index));
  ctx.set_out(index, fwd.y);
  ctx.save(index, ConvSaved{fwd, w});

  ConvForward<TensorId> inf = fwd;
  inf.x = ctx.infer_in(index, 0);
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

void lower_backward(LowerContext& ctx, int index) {
  const ConvSaved& s = ctx.saved<ConvSaved>(index);
  const ConvForward<TensorId>& f = s.fwd;
  const int dy = ctx.grad_out(index);
  ConvWgrad<TensorId> wgrad;
  wgrad.dy = dy, wgrad.x = f.x, wgrad.dw = ctx.grad_of(s.weight);
  wgrad.dbias = f.bias.present() ? TensorId(ctx.grad_of(f.bias)) : TensorId();
  wgrad.window = f.window;
  ctx.backward(make_op(wgrad, index));
  const int dx = ctx.grad_in(index, 0);
  if (dx >= 0) {
    ConvDgrad<TensorId> dgrad;
    dgrad.dy = dy, dgrad.w = f.w, dgrad.dx = dx;
    dgrad.window = f.window;
    ctx.backward(make_op(dgrad, index));
  }
}

}  // namespace

extern const LayerDef kConvLayer{LayerKind::Conv, infer, lower_forward, lower_backward};

}  // namespace kiln

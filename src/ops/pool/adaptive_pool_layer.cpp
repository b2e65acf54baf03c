// PyTorch's AdaptiveAvgPool2d((out_h, out_w)): a feature map of that size, N x out_h x out_w x C,
// whatever the input's. No parameters. Three lowerings, by what the sizes make of it:
//  - the input's own size (VGG's 7x7 at 224x224 input): the identity, so the output and the input
//    gradient are views of the input and of the output gradient (as a flatten's), and no op runs;
//  - 1x1 (squeeze-and-excitation's): global average pooling, GAP_FWD / GAP_BWD, whose (N, C) is the
//    bytes of the N x 1 x 1 x C map;
//  - else ADAPTIVE_AVGPOOL_FWD / _BWD (pool_contract.h), the same op for training and inference.
#include "compile/layer_def.h"
#include "ops/pool/pool_contract.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_nhwc_input(layer, inputs);
  const AdaptiveAvgPoolAttrs& a = attrs_of<AdaptiveAvgPoolAttrs>(layer);
  return {x[0], a.out_h, a.out_w, x[3]};
}

const Shape& input_shape(LowerContext& ctx, int index) { return ctx.program.tensors[ctx.in(index, 0)].shape; }

bool is_identity(LowerContext& ctx, int index) { return input_shape(ctx, index) == ctx.layer(index).out_shape; }

bool is_global(LowerContext& ctx, int index) {
  const Shape& y = ctx.layer(index).out_shape;
  return y[1] == 1 && y[2] == 1;
}

template <template <class> class Fwd>
void emit_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  Fwd<TensorId> fwd;
  fwd.x = ctx.in(index, 0);
  fwd.y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(make_op(fwd, index));
  ctx.set_out(index, fwd.y);
  Fwd<TensorId> inf;
  inf.x = ctx.infer_in(index, 0);
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

template <template <class> class Bwd>
void emit_backward(LowerContext& ctx, int index) {
  const int dx = ctx.grad_in(index, 0);
  if (dx < 0) return;
  Bwd<TensorId> bwd;
  bwd.dy = ctx.grad_out(index), bwd.dx = dx;
  ctx.backward(make_op(bwd, index));
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  if (is_identity(ctx, index)) {
    ctx.set_out(index, ctx.view(layer.name, layer.out_shape, ctx.in(index, 0)));
    ctx.set_infer_out(index, ctx.view(layer.name + ":inf", layer.out_shape, ctx.infer_in(index, 0)));
  } else if (is_global(ctx, index)) {
    emit_forward<GlobalAvgPoolForward>(ctx, index);
  } else {
    emit_forward<AdaptiveAvgPoolForward>(ctx, index);
  }
}

void lower_backward(LowerContext& ctx, int index) {
  if (is_identity(ctx, index)) {
    if (ctx.input_is_data(index, 0)) return;
    ctx.set_grad_in(index, 0, ctx.view("d:" + ctx.layer(index).name + ":in", input_shape(ctx, index),
                                       ctx.grad_out(index)));
  } else if (is_global(ctx, index)) {
    emit_backward<GlobalAvgPoolBackward>(ctx, index);
  } else {
    emit_backward<AdaptiveAvgPoolBackward>(ctx, index);
  }
}

}  // namespace

extern const LayerDef kAdaptiveAvgPoolLayer{LayerKind::AdaptiveAvgPool, infer, lower_forward, lower_backward};

}  // namespace kiln

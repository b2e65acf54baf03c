// Max, average and global average pooling: no parameters, one op each way.
#include "layers/layer_def.h"

namespace kiln {
namespace {

Shape infer_window(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_nhwc_input(layer, inputs);
  const LayerAttrs& a = layer.attrs;
  return {x[0], window_output(layer, x[1], a.kernel, a.stride, a.padding),
          window_output(layer, x[2], a.kernel, a.stride, a.padding), x[3]};
}

Shape infer_global(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_nhwc_input(layer, inputs);
  return {x[0], x[3]};
}

void lower_forward_max(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int y = ctx.activation(layer.name, layer.out_shape);
  const int argmax = ctx.activation(layer.name + ":argmax", layer.out_shape, DType::I32);
  ctx.forward(ctx.op(OpKind::MAXPOOL_FWD, index, {ctx.in(index, 0)}, {y, argmax}));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(ctx.op(OpKind::MAXPOOL_INF, index, {ctx.infer_in(index, 0)}, {yi}));
  ctx.set_infer_out(index, yi);
}

void lower_backward_max(LowerContext& ctx, int index) {
  const int dx = ctx.grad_in(index, 0);
  if (dx < 0) return;
  const int argmax = ctx.program.find(ctx.layer(index).name + ":argmax");
  ctx.backward(ctx.op(OpKind::MAXPOOL_BWD, index, {ctx.grad_out(index), argmax}, {dx}));
}

// Average pools need nothing saved: the same op serves training and inference.
template <OpKind Fwd>
void lower_forward_avg(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(ctx.op(Fwd, index, {ctx.in(index, 0)}, {y}));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(ctx.op(Fwd, index, {ctx.infer_in(index, 0)}, {yi}));
  ctx.set_infer_out(index, yi);
}

template <OpKind Bwd>
void lower_backward_avg(LowerContext& ctx, int index) {
  const int dx = ctx.grad_in(index, 0);
  if (dx >= 0) ctx.backward(ctx.op(Bwd, index, {ctx.grad_out(index)}, {dx}));
}

}  // namespace

extern const LayerDef kMaxPoolLayer{infer_window, lower_forward_max, lower_backward_max};
extern const LayerDef kAvgPoolLayer{infer_window, lower_forward_avg<OpKind::AVGPOOL_FWD>,
                                    lower_backward_avg<OpKind::AVGPOOL_BWD>};
extern const LayerDef kGlobalAvgPoolLayer{infer_global, lower_forward_avg<OpKind::GAP_FWD>,
                                          lower_backward_avg<OpKind::GAP_BWD>};

}  // namespace kiln

#include "layers/layer_def.h"

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
  const int w = ctx.param(layer.name + ".weight", {o, f}, Init::UniformFanIn, f, o);
  const int b = layer.attrs.bias ? ctx.param(layer.name + ".bias", {o}, Init::UniformFanIn, f, o) : -1;
  const int y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(ctx.op(OpKind::LINEAR_FWD, index, {ctx.in(index, 0), w, b}, {y}));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(ctx.op(OpKind::LINEAR_FWD, index, {ctx.infer_in(index, 0), w, b}, {yi}));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int w = ctx.program.find(layer.name + ".weight");
  const int b = ctx.program.find(layer.name + ".bias");
  ctx.backward(ctx.op(OpKind::LINEAR_BWD, index, {ctx.grad_out(index), ctx.in(index, 0), w},
                      {ctx.grad_in(index, 0), ctx.grad_of(w), b >= 0 ? ctx.grad_of(b) : -1}));
}

}  // namespace

extern const LayerDef kLinearLayer{infer, lower_forward, lower_backward};

}  // namespace kiln

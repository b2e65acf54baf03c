// PyTorch's nn.LayerNorm(C, eps) over the last axis: the channels of each position of an NHWC map
// (torchvision's LayerNorm2d, and ConvNeXt's nn.LayerNorm between its permutes, which on kiln's
// channels-last maps need no permute) or the features of each row of an (N, F) input. Parameters
// `<layer>.weight` (ones) and `<layer>.bias` (zeros), nn.LayerNorm's, read by the ops as they are:
// fp32 masters in mixed precision, as BatchNorm's. One LAYER_NORM_FWD saving each row's mean and
// rstd for the one LAYER_NORM_BWD; inference runs the forward without saving them.
#include <string>

#include "compile/layer_def.h"
#include "ops/layer_norm/layer_norm_contract.h"
#include "ops/layer_norm/layer_norm_tiles.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  if (x.size() != 4 && x.size() != 2)
    fail("layer_norm '{}': normalizes the channels of a feature map (N,H,W,C) or the features of rows (N,F), but its "
         "input is {}; give it a map or a flattened row (flatten first)",
         layer.name, shape_str(x));
  return x;
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int64_t c = layer.out_shape.back(), rows = numel(layer.out_shape) / c;
  LayerNormForward<TensorId> f;
  f.x = ctx.in(index, 0);
  f.weight = ctx.param(layer.name + ".weight", {c}, Init::Ones);
  f.bias = ctx.param(layer.name + ".bias", {c}, Init::Zeros);
  f.y = ctx.activation(layer.name, layer.out_shape);
  f.mean = ctx.activation(layer.name + ":mean", {rows}, ctx.param_dtype);
  f.rstd = ctx.activation(layer.name + ":rstd", {rows}, ctx.param_dtype);
  f.eps = attrs_of<LayerNormAttrs>(layer).eps;
  ctx.forward(make_op(f, index));
  ctx.set_out(index, f.y);
  ctx.save(index, f);

  LayerNormForward<TensorId> inf = f;
  inf.x = ctx.infer_in(index, 0);
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  inf.mean = inf.rstd = TensorId{};
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const auto& f = ctx.saved<LayerNormForward<TensorId>>(index);
  LayerNormBackward<TensorId> b;
  b.dy = ctx.grad_out(index);
  b.x = f.x, b.weight = f.weight, b.mean = f.mean, b.rstd = f.rstd;
  b.dx = ctx.grad_in(index, 0);  // absent where the data batch feeds the layer
  b.dweight = ctx.grad_of(f.weight), b.dbias = ctx.grad_of(f.bias);
  // The GPU sums dweight and dbias through per-tile partials (layer_norm_tiles.h); the CPU needs none.
  if (ctx.program.options.device == Device::CUDA) {
    const int64_t c = layer.out_shape.back();
    const int64_t tiles = layer_norm_tiles::tiles(numel(layer.out_shape) / c).count;
    b.partials = ctx.activation(layer.name + ":partials", {tiles, 2, c}, DType::F32);
  }
  ctx.backward(make_op(b, index));
}

}  // namespace

extern const LayerDef kLayerNormLayer{LayerKind::LayerNorm, infer, lower_forward, lower_backward};

}  // namespace kiln

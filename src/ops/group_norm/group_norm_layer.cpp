// PyTorch's nn.GroupNorm(groups, C, eps) on a channels-last map (N,H,W,C), or on flat features
// (N,C) as PyTorch takes them too (each group then its C / groups features). Parameters
// `<layer>.weight` (ones) and `<layer>.bias` (zeros), C each, as PyTorch names them; in mixed
// precision the op reads their fp32 masters (as BatchNorm's) and writes their gradients in fp32.
// No running statistics: training and inference normalize alike, so both emit GROUP_NORM_FWD; the
// training forward saves each (sample, group)'s mean and rstd for GROUP_NORM_BWD. GPU programs
// give each op a workspace tensor for its partial sums (group_norm_geometry.h).
#include <algorithm>
#include <string>

#include "compile/layer_def.h"
#include "ops/group_norm/group_norm_contract.h"
#include "ops/group_norm/group_norm_geometry.h"

namespace kiln {
namespace {

// The divisor of `channels` nearest below `groups` (at least 1): what the refusal suggests.
int64_t dividing_groups(int64_t channels, int64_t groups) {
  for (int64_t g = std::min(groups, channels); g > 1; --g)
    if (channels % g == 0) return g;
  return 1;
}

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  const GroupNormAttrs& a = attrs_of<GroupNormAttrs>(layer);
  if (x.size() != 4 && x.size() != 2)
    fail("{}: normalizes a feature map (N,H,W,C) or flat features (N,C), but its input is {}; give it one of those",
         layer_label(layer), shape_str(x));
  const int64_t c = x.back();
  if (c % a.groups != 0)
    fail("{}: {} groups do not divide its input's {} channels ({}); nn.GroupNorm needs groups that divide the "
         "channels: use {} groups, or give the layer before it a multiple of {} channels",
         layer_label(layer), a.groups, c, shape_str(x), dividing_groups(c, a.groups), a.groups);
  return x;
}

GroupNormGeom geometry(const Layer& layer) {
  const Shape& s = layer.out_shape;
  return {s[0], s.size() == 4 ? s[1] * s[2] : 1, s.back(), attrs_of<GroupNormAttrs>(layer).groups};
}

// The GPU kernels' partial sums; the CPU's need none.
TensorId workspace(LowerContext& ctx, const std::string& name, const GroupNormGeom& g) {
  if (ctx.program.options.device != Device::CUDA) return {};
  return ctx.activation(name, {group_norm_gpu::workspace(g).floats}, DType::F32);
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const GroupNormAttrs& a = attrs_of<GroupNormAttrs>(layer);
  const GroupNormGeom g = geometry(layer);
  const Shape channels = {g.c}, statistics = {g.n, g.groups};
  GroupNormForward<TensorId> f;
  f.x = ctx.in(index, 0);
  f.weight = ctx.param(layer.name + ".weight", channels, Init::Ones);
  f.bias = ctx.param(layer.name + ".bias", channels, Init::Zeros);
  f.y = ctx.activation(layer.name, layer.out_shape);
  f.mean = ctx.activation(layer.name + ":saved_mean", statistics, ctx.param_dtype);
  f.rstd = ctx.activation(layer.name + ":saved_rstd", statistics, ctx.param_dtype);
  f.workspace = workspace(ctx, layer.name + ":workspace", g);
  f.groups = a.groups, f.eps = a.eps;
  ctx.forward(make_op(f, index));
  ctx.set_out(index, f.y);
  ctx.save(index, f);

  GroupNormForward<TensorId> inf = f;
  inf.x = ctx.infer_in(index, 0);
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  inf.mean = inf.rstd = TensorId();  // no backward reads them
  inf.workspace = workspace(ctx, layer.name + ":inf:workspace", g);
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

void lower_backward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const auto& f = ctx.saved<GroupNormForward<TensorId>>(index);
  GroupNormBackward<TensorId> b;
  b.dy = ctx.grad_out(index);
  b.x = f.x, b.weight = f.weight, b.mean = f.mean, b.rstd = f.rstd;
  b.dx = ctx.grad_in(index, 0);  // absent on the data batch: the weight and bias still train
  b.dweight = ctx.grad_of(f.weight), b.dbias = ctx.grad_of(f.bias);
  b.workspace = workspace(ctx, layer.name + ":grad_workspace", geometry(layer));
  b.groups = f.groups;
  ctx.backward(make_op(b, index));
}

}  // namespace

extern const LayerDef kGroupNormLayer{LayerKind::GroupNorm, infer, lower_forward, lower_backward};

}  // namespace kiln

// torchvision's channel_shuffle(x, groups) (ShuffleNetV2): x.view(N, g, C / g, H, W).transpose(1, 2)
// .contiguous().view(N, C, H, W). On kiln's NHWC maps each pixel's channels, seen as g x (C / g), are
// transposed: y[..., j * g + i] = x[..., i * (C / g) + j]. One CHANNEL_SHUFFLE_FWD in training and one
// in inference; one CHANNEL_SHUFFLE_BWD gives the input the inverse permutation of dy. A shuffle that
// moves no channel (groups 1, or as many groups as channels) is the identity: its output is its input
// under the layer's name and its input's gradient the output's, as a flatten's, and no op runs.
#include "compile/layer_def.h"
#include "ops/channel/channel_contract.h"

namespace kiln {
namespace {

int groups_of(const Layer& layer) { return attrs_of<ChannelShuffleAttrs>(layer).groups; }

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_nhwc_input(layer, inputs);
  const int g = groups_of(layer);
  if (x[3] % g != 0)
    fail("channel_shuffle '{}': its input {} has {} channels, which {} groups do not split into groups of one size; "
         "use a number of groups that divides {} (ShuffleNetV2 shuffles 2 groups of an even number of channels)",
         layer.name, shape_str(x), x[3], g, x[3]);
  return x;
}

bool is_identity(const Layer& layer) {
  const int g = groups_of(layer);
  return g == 1 || g == layer.out_shape[3];
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  if (is_identity(layer)) {
    ctx.set_out(index, ctx.view(layer.name, layer.out_shape, ctx.in(index, 0)));
    ctx.set_infer_out(index, ctx.view(layer.name + ":inf", layer.out_shape, ctx.infer_in(index, 0)));
    return;
  }
  const int y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(make_op(ChannelShuffleForward<TensorId>{ctx.in(index, 0), y, groups_of(layer)}, index));
  ctx.set_out(index, y);
  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(ChannelShuffleForward<TensorId>{ctx.infer_in(index, 0), yi, groups_of(layer)}, index));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  if (ctx.input_is_data(index, 0)) return;
  const Layer& layer = ctx.layer(index);
  if (is_identity(layer)) {  // a view, as flatten's: dy may be the program's output gradient, a tensor of its own role
    ctx.set_grad_in(index, 0, ctx.view("d:" + layer.name + ":in", layer.out_shape, ctx.grad_out(index)));
    return;
  }
  ctx.backward(make_op(ChannelShuffleBackward<TensorId>{ctx.grad_out(index), ctx.grad_in(index, 0), groups_of(layer)},
                       index));
}

}  // namespace

extern const LayerDef kChannelShuffleLayer{LayerKind::ChannelShuffle, infer, lower_forward, lower_backward};

}  // namespace kiln

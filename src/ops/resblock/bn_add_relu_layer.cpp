// A ResNet block end, relu(BN(conv(x)) + shortcut), fused (src/ops/resblock/). Input 0 is a
// conv_bn layer, whose output is the convolution's and whose normalization is applied here;
// input 1, the shortcut, is another conv_bn (a downsample projection, normalized here too) or
// any layer (the identity shortcut). The gradients this layer hands back are those of the
// convolutions' outputs (BN's backward runs here), or the shortcut's own gradient.
#include "ir/fused_layer_kinds.h"
#include "ops/resblock/conv_bn_layer.h"
#include "ops/resblock/resblock_contract.h"

namespace kiln {
namespace {

const ConvBnSaved* conv_bn_input(const LowerContext& ctx, int index, int i) {
  const int in = ctx.layer(index).inputs.at(i);
  return ctx.layer(in).kind == fused_layer::ConvBN ? &ctx.saved<ConvBnSaved>(in) : nullptr;
}

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  if (inputs.size() != 2) fail("bn_add_relu '{}': expects 2 inputs, got {}", layer.name, inputs.size());
  if (inputs[0] != inputs[1] || inputs[0].size() != 4)
    fail("bn_add_relu '{}': the body gives {} and the shortcut {}; both must be the same (N,H,W,C) shape (give the "
         "shortcut a projection: a 1x1 conv with the body's stride and channels)",
         layer.name, shape_str(inputs[0]), shape_str(inputs[1]));
  return inputs[0];
}

void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const ConvBnSaved* body = conv_bn_input(ctx, index, 0);
  if (!body) fail("bn_add_relu '{}': its first input must be a conv_bn layer (the compiler's fusion makes it)", layer.name);
  const ConvBnSaved* projection = conv_bn_input(ctx, index, 1);

  BnAddRelu<TensorId> f;
  f.a = body->fwd.conv_out, f.scale_a = body->fwd.scale, f.shift_a = body->fwd.shift;
  f.b = ctx.in(index, 1);
  if (projection) f.scale_b = projection->fwd.scale, f.shift_b = projection->fwd.shift;
  f.y = ctx.activation(layer.name, layer.out_shape);
  f.bitmask = ctx.activation(layer.name + ":bitmask", {(numel(layer.out_shape) + 7) / 8}, DType::U8);
  ctx.forward(make_op(f, index));
  ctx.set_out(index, f.y);
  ctx.save(index, f);

  BnAddRelu<TensorId> inf;
  inf.a = body->inf.conv_out, inf.scale_a = body->inf.scale, inf.shift_a = body->inf.shift;
  inf.b = ctx.infer_in(index, 1);
  if (projection) inf.scale_b = projection->inf.scale, inf.shift_b = projection->inf.shift;
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  Op op = make_op(inf, index);
  op.kind = OpKind::BN_ADD_RELU_INF;
  ctx.inference(std::move(op));
  ctx.set_infer_out(index, inf.y);
}

void lower_backward(LowerContext& ctx, int index) {
  const ConvBnSaved& body = *conv_bn_input(ctx, index, 0);
  const ConvBnSaved* projection = conv_bn_input(ctx, index, 1);
  const BnAddRelu<TensorId>& f = ctx.saved<BnAddRelu<TensorId>>(index);
  BnAddReluBackward<TensorId> b;
  // The output's gradient as its two terms where it has two (the next block's body and shortcut),
  // added as the kernels load them, so no GRAD_SUM writes their sum: one activation-sized pass
  // fewer per identity block end (ResNet-50 1.4-1.8% faster on an H200; docs/results.md, 'The
  // block ends read their gradient's two terms'). The kernels take a second term only together
  // with db, which a block end lacks only when its shortcut is the data batch.
  const bool terms = !ctx.input_is_data(index, 1);
  const std::vector<int> dy = terms ? ctx.grad_out_terms(index, 2) : std::vector<int>{ctx.grad_out(index)};
  b.dy = dy[0];
  if (dy.size() == 2) b.dy2 = dy[1];
  b.bitmask = f.bitmask;
  b.a = f.a, b.gamma_a = body.fwd.gamma, b.saved_mean_a = body.fwd.saved_mean;
  b.saved_inv_std_a = body.fwd.saved_inv_std;
  b.da = ctx.grad_in(index, 0);
  b.dgamma_a = ctx.grad_of(body.fwd.gamma), b.dbeta_a = ctx.grad_of(body.fwd.beta);
  if (projection) {
    b.b = f.b, b.gamma_b = projection->fwd.gamma, b.saved_mean_b = projection->fwd.saved_mean;
    b.saved_inv_std_b = projection->fwd.saved_inv_std;
    b.dgamma_b = ctx.grad_of(projection->fwd.gamma), b.dbeta_b = ctx.grad_of(projection->fwd.beta);
  }
  b.db = ctx.grad_in(index, 1);  // absent when an identity shortcut is the data batch
  ctx.backward(make_op(b, index));
}

}  // namespace

extern const LayerDef kBnAddReluLayer{fused_layer::BnAddRelu, infer, lower_forward, lower_backward};

}  // namespace kiln

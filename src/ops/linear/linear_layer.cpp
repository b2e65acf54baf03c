#include "compile/layer_def.h"
#include "ops/linear/linear_contract.h"

namespace kiln {
namespace {

// A flat input (N, F) gives (N, out_features); a channels-last map (N, H, W, C) gives (N, H, W,
// out_features): nn.Linear applied at every position, as ConvNeXt applies it after permuting to
// channels-last. kiln's maps are channels-last already, so the map is the matrix (N*H*W, C) and the
// ops below see only matrices: the lowering hands them 2-D views.
Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  const int64_t out = attrs_of<LinearAttrs>(layer).out_features;
  if (x.size() == 2) return {x[0], out};
  if (x.size() == 4) return {x[0], x[1], x[2], out};
  fail("fc '{}': takes flat features (N,F) or a feature map (N,H,W,C), whose channels it maps at every "
       "position, but gets {}; add flatten() or global_avgpool() before it for a classifier",
       layer.name, shape_str(x));
}

// `tensor` as the matrix the ops read: itself when 2-D, else a view (rows, last axis).
int as_matrix(LowerContext& ctx, const std::string& name, int tensor) {
  const Shape shape = ctx.program.tensors[size_t(tensor)].shape;
  if (shape.size() == 2) return tensor;
  return ctx.view(name, {numel(shape) / shape.back(), shape.back()}, tensor);
}

// What the backward lowering needs from forward: the training forward op (which reads the
// parameters' compute copies in mixed precision) and the parameters themselves (their gradients
// are written into the compute copies' gradients, which a CAST turns into the fp32 ones).
struct LinearSaved {
  LinearForward<TensorId> fwd;
  TensorId weight, bias;
};

// Weight (out, in) and bias as LinearAttrs::init and bias_init say: PyTorch's default nn.Linear
// init, U(-1/sqrt(in), 1/sqrt(in)) for both, or a family's (torchvision's VGG: N(0, 0.01²), bias 0).
//
// Mixed precision: fp32 masters, and fp16/bf16 copies of both the weight and the bias, which the
// ops read (as convolution weights do). The bias gets a copy too, unlike conv's (which stays fp32
// because cuDNN's bias input is fp32): cuBLASLt's bias epilogue, and the bias-gradient epilogue of
// the weight-gradient GEMM, take and write the bias in the GEMM output's dtype
// (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE documents no fp32 bias for an fp16/bf16 output). fp32
// and fp64 programs make no copies: nothing changes there.
void lower_forward(LowerContext& ctx, int index) {
  const Layer& layer = ctx.layer(index);
  const int64_t f = ctx.program.tensors[ctx.in(index, 0)].shape.back();
  const LinearAttrs& a = attrs_of<LinearAttrs>(layer);
  const int64_t o = a.out_features;
  const int w = weight_param(ctx, layer.name + ".weight", {o, f}, a.init, f, o, /*compute_copy=*/true);
  const int b = a.bias ? bias_param(ctx, layer.name + ".bias", {o}, a.bias_init, f, /*compute_copy=*/true) : -1;
  const int y = ctx.activation(layer.name, layer.out_shape);
  LinearForward<TensorId> fwd;
  fwd.x = as_matrix(ctx, layer.name + ":x_rows", ctx.in(index, 0));
  fwd.w = ctx.compute_param(w);
  fwd.bias = b >= 0 ? TensorId(ctx.compute_param(b)) : TensorId();
  fwd.y = as_matrix(ctx, layer.name + ":rows", y);
  ctx.forward(make_op(fwd, index));
  ctx.set_out(index, y);
  ctx.save(index, LinearSaved{fwd, w, b});

  const int yi = ctx.activation(layer.name + ":inf", layer.out_shape);
  LinearForward<TensorId> inf = fwd;
  inf.x = as_matrix(ctx, layer.name + ":inf:x_rows", ctx.infer_in(index, 0));
  inf.y = as_matrix(ctx, layer.name + ":inf:rows", yi);
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, yi);
}

void lower_backward(LowerContext& ctx, int index) {
  const LinearSaved& s = ctx.saved<LinearSaved>(index);
  LinearBackward<TensorId> bwd;
  const std::string& name = ctx.layer(index).name;
  bwd.dy = as_matrix(ctx, "d:" + name + ":rows", ctx.grad_out(index)), bwd.x = s.fwd.x, bwd.w = s.fwd.w;
  const int dx = ctx.grad_in(index, 0);
  if (dx >= 0) bwd.dx = as_matrix(ctx, "d:" + name + ":in_rows", dx);
  // Reading a frozen layer (CompileOptions::freeze), no dX is wanted: the CPU kernel computes it
  // with the weight gradient, so it goes to a scratch tensor.
  if (!bwd.dx.present())
    bwd.dx = ctx.activation(ctx.layer(index).name + ":unused_dx", ctx.program.tensors.at(s.fwd.x).shape,
                            ctx.program.tensors.at(s.fwd.x).dtype);
  bwd.dw = ctx.grad_of(s.weight);
  bwd.dbias = s.bias.present() ? TensorId(ctx.grad_of(s.bias)) : TensorId();
  ctx.backward(make_op(bwd, index));
}

}  // namespace

extern const LayerDef kLinearLayer{LayerKind::Linear, infer, lower_forward, lower_backward};

}  // namespace kiln

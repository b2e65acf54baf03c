#include "compile/layer_def.h"
#include "ops/linear/linear_contract.h"

namespace kiln {
namespace {

Shape infer(const Layer& layer, const std::vector<Shape>& inputs) {
  const Shape& x = single_input(layer, inputs);
  if (x.size() != 2)
    fail("fc '{}': needs a flat input (N,F) but gets {}; add flatten() or global_avgpool() before it",
         layer.name, shape_str(x));
  return {x[0], attrs_of<LinearAttrs>(layer).out_features};
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
  const int64_t f = ctx.program.tensors[ctx.in(index, 0)].shape[1];
  const LinearAttrs& a = attrs_of<LinearAttrs>(layer);
  const int64_t o = a.out_features;
  const int w = weight_param(ctx, layer.name + ".weight", {o, f}, a.init, f, o, /*compute_copy=*/true);
  const int b = a.bias ? bias_param(ctx, layer.name + ".bias", {o}, a.bias_init, f, /*compute_copy=*/true) : -1;
  LinearForward<TensorId> fwd;
  fwd.x = ctx.in(index, 0);
  fwd.w = ctx.compute_param(w);
  fwd.bias = b >= 0 ? TensorId(ctx.compute_param(b)) : TensorId();
  fwd.y = ctx.activation(layer.name, layer.out_shape);
  ctx.forward(make_op(fwd, index));
  ctx.set_out(index, fwd.y);
  ctx.save(index, LinearSaved{fwd, w, b});

  LinearForward<TensorId> inf = fwd;
  inf.x = ctx.infer_in(index, 0);
  inf.y = ctx.activation(layer.name + ":inf", layer.out_shape);
  ctx.inference(make_op(inf, index));
  ctx.set_infer_out(index, inf.y);
}

void lower_backward(LowerContext& ctx, int index) {
  const LinearSaved& s = ctx.saved<LinearSaved>(index);
  LinearBackward<TensorId> bwd;
  bwd.dy = ctx.grad_out(index), bwd.x = s.fwd.x, bwd.w = s.fwd.w;
  bwd.dx = ctx.grad_in(index, 0);
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

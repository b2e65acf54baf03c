// ReLU (byte mask), dropout, stochastic depth, residual add, gradient sum and dtype casts on the GPU.
#include <algorithm>
#include <vector>

#include "ops/common/op_args.h"
#include "ops/elementwise/elementwise_contract.h"
#include "ops/elementwise/elementwise_cpu.h"  // dropout_stream: the GPU draws the CPU's masks
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/elementwise/stochastic_depth_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

void relu_fwd(const OpCall& call, const ReluForward<TensorArg>& a) {
  relu_forward(a.x.dtype(), a.x.data, a.x.numel(), a.y.data, a.mask.as<uint8_t>(), main_stream(call), call.where());
}
void relu_inf(const OpCall& call, const ReluInference<TensorArg>& a) {
  relu_forward(a.x.dtype(), a.x.data, a.x.numel(), a.y.data, nullptr, main_stream(call), call.where());
}
void relu_bwd(const OpCall& call, const ReluBackward<TensorArg>& a) {
  relu_backward(a.dy.dtype(), a.dy.data, a.mask.as<uint8_t>(), a.dy.numel(), a.dx.data, main_stream(call),
                call.where());
}
// A byte mask: one U8 per element of `like`.
void expect_byte_mask(const OpCall& call, const TensorArg& mask, const TensorArg& like) {
  if (mask.numel() != like.numel() || mask.dtype() != DType::U8)
    fail("{}: mask '{}' is {} {} but must hold one U8 per element of '{}' ({}); recompile the program",
         call.where(), mask.spec->name, dtype_name(mask.dtype()), shape_str(mask.shape()), like.spec->name,
         shape_str(like.shape()));
}
// The mask of step `call.scalars.step` is drawn from the layer's own stream, as on the CPU
// (elementwise_ops_cpu.cpp), so CPU and GPU programs drop the same elements.
void dropout_fwd(const OpCall& call, const DropoutForward<TensorArg>& a) {
  expect_like(call, a.y, "output", a.x);
  expect_byte_mask(call, a.mask, a.x);
  if (call.device_scalars) {  // the step's seed and count as the device holds them (CUDA Graph replay)
    dropout_forward(a.x.dtype(), a.x.data, a.x.numel(), float(a.p), &call.device_scalars->seed, &call.device_scalars->step,
                    a.layer_key, a.y.data, a.mask.as<uint8_t>(), main_stream(call), call.where());
    return;
  }
  dropout_forward(a.x.dtype(), a.x.data, a.x.numel(), float(a.p), call.scalars.seed,
                  cpu::dropout_stream(a.layer_key, call.scalars.step), a.y.data, a.mask.as<uint8_t>(),
                  main_stream(call), call.where());
}
void dropout_bwd(const OpCall& call, const DropoutBackward<TensorArg>& a) {
  expect_like(call, a.dx, "input gradient", a.dy);
  expect_byte_mask(call, a.mask, a.dy);
  dropout_backward(a.dy.dtype(), a.dy.data, a.mask.as<uint8_t>(), a.dy.numel(), float(a.p), a.dx.data, main_stream(call),
                   call.where());
}
// Stochastic depth's samples: the first dimension of x (or dy); the mask holds one byte each.
int64_t samples(const TensorArg& x) { return x.shape().empty() ? 1 : x.shape()[0]; }
int64_t row_size(const TensorArg& x) { return samples(x) ? x.numel() / samples(x) : 0; }
void expect_sample_mask(const OpCall& call, const TensorArg& mask, const TensorArg& like) {
  if (mask.numel() != samples(like) || mask.dtype() != DType::U8)
    fail("{}: mask '{}' is {} {} but must hold one U8 per sample of '{}' ({}); recompile the program", call.where(),
         mask.spec->name, dtype_name(mask.dtype()), shape_str(mask.shape()), like.spec->name, shape_str(like.shape()));
}
// The mask is drawn as dropout's (above): the CPU's stream, read on the device in a replayed graph.
void stochastic_depth_fwd(const OpCall& call, const StochasticDepthForward<TensorArg>& a) {
  expect_like(call, a.y, "output", a.x);
  expect_sample_mask(call, a.mask, a.x);
  if (call.device_scalars) {
    stochastic_depth_forward(a.x.dtype(), a.x.data, samples(a.x), row_size(a.x), float(a.p), &call.device_scalars->seed,
                             &call.device_scalars->step, a.layer_key, a.y.data, a.mask.as<uint8_t>(),
                             main_stream(call), call.where());
    return;
  }
  stochastic_depth_forward(a.x.dtype(), a.x.data, samples(a.x), row_size(a.x), float(a.p), call.scalars.seed,
                           cpu::dropout_stream(a.layer_key, call.scalars.step), a.y.data, a.mask.as<uint8_t>(),
                           main_stream(call), call.where());
}
void stochastic_depth_bwd(const OpCall& call, const StochasticDepthBackward<TensorArg>& a) {
  expect_like(call, a.dx, "input gradient", a.dy);
  expect_sample_mask(call, a.mask, a.dy);
  stochastic_depth_backward(a.dy.dtype(), a.dy.data, a.mask.as<uint8_t>(), samples(a.dy), row_size(a.dy), float(a.p),
                            a.dx.data, main_stream(call), call.where());
}
void add_fwd(const OpCall& call, const Add<TensorArg>& a) {
  if (a.a.shape() != a.b.shape())
    fail("{}: shapes differ, {} and {}", call.where(), shape_str(a.a.shape()), shape_str(a.b.shape()));
  add(a.a.dtype(), a.a.data, a.b.data, a.a.numel(), a.y.data, main_stream(call), call.where());
}
void grad_sum_op(const OpCall& call, const GradSum<TensorArg>& a) {
  std::vector<const void*> inputs;
  for (const TensorArg& g : a.terms) inputs.push_back(g.data);
  grad_sum(a.sum.dtype(), inputs.data(), int(inputs.size()), a.sum.numel(), a.sum.data, main_stream(call),
           call.where());
}
// Master weights into their fp16/bf16 copies (Program::refresh_copies, after the host wrote
// parameters): the copied parameters are a prefix of the fp32 region, so one flat conversion
// does all of them.
void cast_op(const OpCall& call, const Cast<TensorArg>& a) {
  const int64_t n = std::min(a.src.numel(), a.dst.numel());
  cast(a.src.dtype(), a.src.data, a.dst.dtype(), a.dst.data, n, main_stream(call), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable elementwise_cuda_ops{
    Device::CUDA,
    {kernel<ReluForward, cuda::relu_fwd>(), kernel<ReluInference, cuda::relu_inf>(),
     kernel<ReluBackward, cuda::relu_bwd>(), kernel<Add, cuda::add_fwd>(), kernel<GradSum, cuda::grad_sum_op>(),
     kernel<Cast, cuda::cast_op>(), kernel<DropoutForward, cuda::dropout_fwd>(),
     kernel<DropoutBackward, cuda::dropout_bwd>(), kernel<StochasticDepthForward, cuda::stochastic_depth_fwd>(),
     kernel<StochasticDepthBackward, cuda::stochastic_depth_bwd>()}};
}  // namespace kiln::ops

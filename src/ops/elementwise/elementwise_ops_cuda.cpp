// ReLU (byte mask), residual add, gradient sum and dtype casts on the GPU.
#include "ops/elementwise/elementwise_cuda.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

void relu_fwd(const OpCall& call) {
  relu_forward(call.in[0].dtype(), call.in[0].data, call.in[0].numel(), call.out[0].data, call.out[1].as<uint8_t>(),
               main_stream(call), call.where());
}
void relu_inf(const OpCall& call) {
  relu_forward(call.in[0].dtype(), call.in[0].data, call.in[0].numel(), call.out[0].data, nullptr, main_stream(call),
               call.where());
}
void relu_bwd(const OpCall& call) {
  relu_backward(call.in[0].dtype(), call.in[0].data, call.in[1].as<uint8_t>(), call.in[0].numel(), call.out[0].data,
                main_stream(call), call.where());
}
void add_fwd(const OpCall& call) {
  if (call.in[0].shape() != call.in[1].shape())
    fail("{}: shapes differ, {} and {}", call.where(), shape_str(call.in[0].shape()), shape_str(call.in[1].shape()));
  add(call.in[0].dtype(), call.in[0].data, call.in[1].data, call.in[0].numel(), call.out[0].data, main_stream(call),
      call.where());
}
void grad_sum_op(const OpCall& call) {
  std::vector<const void*> inputs;
  for (const TensorArg& g : call.in) inputs.push_back(g.data);
  grad_sum(call.out[0].dtype(), inputs.data(), int(inputs.size()), call.out[0].numel(), call.out[0].data,
           main_stream(call), call.where());
}
// Master weights into their fp16/bf16 copies, or compute gradients into the fp32 region: the
// copied parameters are a prefix of the fp32 region, so one flat conversion does all of them.
void cast_op(const OpCall& call) {
  const int64_t n = std::min(call.in[0].numel(), call.out[0].numel());
  cast(call.in[0].dtype(), call.in[0].data, call.out[0].dtype(), call.out[0].data, n, main_stream(call), call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln {
void register_elementwise_cuda() {
  using namespace kiln::cuda;
  register_op(Device::CUDA, OpKind::RELU_FWD, relu_fwd);
  register_op(Device::CUDA, OpKind::RELU_INF, relu_inf);
  register_op(Device::CUDA, OpKind::RELU_BWD, relu_bwd);
  register_op(Device::CUDA, OpKind::ADD_FWD, add_fwd);
  register_op(Device::CUDA, OpKind::GRAD_SUM, grad_sum_op);
  register_op(Device::CUDA, OpKind::CAST, cast_op);
}
}  // namespace kiln

// The channel family's ops on the GPU: the checks the CPU makes (channel_op_checks.h), then the
// copies of channel_cuda.h on the main stream. A shuffle's backward is the shuffle of dy in
// C / groups groups.
#include <vector>

#include "ops/channel/channel_contract.h"
#include "ops/channel/channel_cuda.h"
#include "ops/channel/channel_op_checks.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/op_call.h"

namespace kiln::cuda {
namespace {

using channel_checks::channels;
using channel_checks::rows;

cudaStream_t main_stream(const OpCall& call) { return cuda_backend(call.backend, call.where()).stream(0); }

void shuffle_fwd(const OpCall& call, const ChannelShuffleForward<TensorArg>& a) {
  channel_checks::check_shuffle(call, a.x, a.y, a.groups);
  shuffle_channels(a.x.dtype(), a.x.data, a.y.data, rows(a.x), channels(a.x), a.groups, main_stream(call),
                   call.where());
}

void shuffle_bwd(const OpCall& call, const ChannelShuffleBackward<TensorArg>& a) {
  channel_checks::check_shuffle(call, a.dy, a.dx, a.groups);
  shuffle_channels(a.dy.dtype(), a.dy.data, a.dx.data, rows(a.dy), channels(a.dy), channels(a.dy) / a.groups,
                   main_stream(call), call.where());
}

void slice_fwd(const OpCall& call, const ChannelSliceForward<TensorArg>& a) {
  channel_checks::check_slice_forward(call, a);
  slice_channels(a.x.dtype(), a.x.data, channels(a.x), a.start, a.y.data, rows(a.y), channels(a.y), main_stream(call),
                 call.where());
}

void slice_bwd(const OpCall& call, const ChannelSliceBackward<TensorArg>& a) {
  channel_checks::check_slice_backward(call, a);
  std::vector<SliceGradientPart> parts;
  for (const TensorArg& dy : a.dys) parts.push_back({dy.data, channels(dy)});
  join_slice_gradients(a.dx.dtype(), parts, a.start, a.dx.data, rows(a.dx), channels(a.dx), main_stream(call),
                       call.where());
}

}  // namespace
}  // namespace kiln::cuda

namespace kiln::ops {
extern const OpTable channel_cuda_ops{
    Device::CUDA,
    {kernel<ChannelShuffleForward, cuda::shuffle_fwd>(), kernel<ChannelShuffleBackward, cuda::shuffle_bwd>(),
     kernel<ChannelSliceForward, cuda::slice_fwd>(), kernel<ChannelSliceBackward, cuda::slice_bwd>()}};
}  // namespace kiln::ops

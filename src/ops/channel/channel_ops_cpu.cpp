// Op wrappers binding the channel family's ops to the CPU kernels (channel_cpu.h): they check the
// tensors an op was compiled with (channel_op_checks.h), then dispatch on dtype. A shuffle's
// backward is the shuffle of dy in C / groups groups.
#include <vector>

#include "ops/channel/channel_contract.h"
#include "ops/channel/channel_cpu.h"
#include "ops/channel/channel_op_checks.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

using channel_checks::channels;
using channel_checks::rows;

void shuffle(const TensorArg& in, const TensorArg& out, int64_t groups, const char* what) {
  dispatch_float(in.dtype(), what, [&](auto t) {
    using T = decltype(t);
    cpu::shuffle_channels<T>(in.as<T>(), out.as<T>(), rows(in), channels(in), groups);
  });
}

void shuffle_fwd(const OpCall& call, const ChannelShuffleForward<TensorArg>& a) {
  channel_checks::check_shuffle(call, a.x, a.y, a.groups);
  shuffle(a.x, a.y, a.groups, "CHANNEL_SHUFFLE_FWD");
}

void shuffle_bwd(const OpCall& call, const ChannelShuffleBackward<TensorArg>& a) {
  channel_checks::check_shuffle(call, a.dy, a.dx, a.groups);
  shuffle(a.dy, a.dx, channels(a.dy) / a.groups, "CHANNEL_SHUFFLE_BWD");
}

void slice_fwd(const OpCall& call, const ChannelSliceForward<TensorArg>& a) {
  channel_checks::check_slice_forward(call, a);
  dispatch_float(a.x.dtype(), "CHANNEL_SLICE_FWD", [&](auto t) {
    using T = decltype(t);
    cpu::slice_channels<T>(a.x.as<T>(), channels(a.x), a.start, a.y.as<T>(), rows(a.y), channels(a.y));
  });
}

void slice_bwd(const OpCall& call, const ChannelSliceBackward<TensorArg>& a) {
  channel_checks::check_slice_backward(call, a);
  dispatch_float(a.dx.dtype(), "CHANNEL_SLICE_BWD", [&](auto t) {
    using T = decltype(t);
    std::vector<cpu::SliceGradient<T>> parts;
    for (const TensorArg& dy : a.dys) parts.push_back({dy.as<T>(), channels(dy)});
    cpu::join_slice_gradients<T>(parts, a.start, a.dx.as<T>(), rows(a.dx), channels(a.dx));
  });
}

}  // namespace

namespace ops {
extern const OpTable channel_cpu_ops{Device::CPU,
                                     {kernel<ChannelShuffleForward, shuffle_fwd>(),
                                      kernel<ChannelShuffleBackward, shuffle_bwd>(),
                                      kernel<ChannelSliceForward, slice_fwd>(), kernel<ChannelSliceBackward, slice_bwd>()}};
}  // namespace ops

}  // namespace kiln

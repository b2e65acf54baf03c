// Op wrappers binding CONCAT_FWD and CONCAT_BWD to the CPU copy (concat_cpu.h): they check the
// tensors an op was compiled with (concat_op_checks.h), then dispatch on dtype.
#include "ops/concat/concat_contract.h"
#include "ops/concat/concat_cpu.h"
#include "ops/concat/concat_op_checks.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

using concat_checks::channels;
using concat_checks::rows;

void concat_fwd(const OpCall& call, const ConcatForward<TensorArg>& a) {
  concat_checks::check_forward(call, a);
  dispatch_float(a.y.dtype(), "CONCAT_FWD", [&](auto t) {
    using T = decltype(t);
    int64_t offset = 0;
    for (const TensorArg& x : a.xs) {
      cpu::copy_channels<T>(x.as<T>(), channels(x), 0, a.y.as<T>(), channels(a.y), offset, rows(a.y), channels(x));
      offset += channels(x);
    }
  });
}

void concat_bwd(const OpCall& call, const ConcatBackward<TensorArg>& a) {
  concat_checks::check_backward(call, a);
  dispatch_float(a.dy.dtype(), "CONCAT_BWD", [&](auto t) {
    using T = decltype(t);
    cpu::copy_channels<T>(a.dy.as<T>(), channels(a.dy), a.channel_offset, a.dx.as<T>(), channels(a.dx), 0,
                          rows(a.dx), channels(a.dx));
  });
}

}  // namespace

namespace ops {
extern const OpTable concat_cpu_ops{Device::CPU, {kernel<ConcatForward, concat_fwd>(), kernel<ConcatBackward, concat_bwd>()}};
}  // namespace ops

}  // namespace kiln

#pragma once
// Checks of the tensors a CPU op wrapper is given against its layer's geometry, for the ops
// that combine a convolution with per-channel tensors (CBR, the fused ResNet block ends). Each
// error names the op, its layer, the tensor and the fix.
#include <string>

#include "kiln/error.h"
#include "ops/common/op_args.h"
#include "ops/conv/conv_cpu.h"
#include "runtime/op_call.h"

namespace kiln {

struct CpuOpChecker {
  const OpCall& call;
  const char* op;
  std::string layer = layer_name(call);

  void shape(const TensorArg& t, const Shape& want, const char* role) const {
    if (t.shape() != want)
      fail(
          "{} layer '{}': {} '{}' has shape {} but the layer needs {}; rebuild the program so "
          "the tensor matches the layer's geometry",
          op, layer, role, t.spec->name, shape_str(t.shape()), shape_str(want));
  }
  void dtype(const TensorArg& t, DType want, const char* role) const {
    if (t.dtype() != want)
      fail(
          "{} layer '{}': {} '{}' is {} but must be {} (all float tensors of the op share the "
          "activation dtype; masks are U8)",
          op, layer, role, t.spec->name, dtype_name(t.dtype()), dtype_name(want));
  }
  void like(const TensorArg& t, const Shape& want, DType dt, const char* role) const {
    shape(t, want, role);
    dtype(t, dt, role);
  }
  void per_channel(const TensorArg& t, int64_t k, DType want, const char* role) const { like(t, {k}, want, role); }
  void bitmask(const TensorArg& t, int64_t elements) const { like(t, {(elements + 7) / 8}, DType::U8, "bitmask"); }
  // The activation dtype, checked before the other tensors are compared with it.
  DType activation_dtype(const TensorArg& x) const {
    if (x.dtype() != DType::F32 && x.dtype() != DType::F64)
      fail(
          "{} layer '{}': input '{}' is {}, which the CPU backend does not support; compile "
          "with precision fp32 (or fp64)",
          op, layer, x.spec->name, dtype_name(x.dtype()));
    return x.dtype();
  }
  cpu::ConvGeom geometry(const TensorArg& x, const TensorArg& w, int stride, int padding) const {
    try {
      return cpu::ConvGeom::make(x.shape(), w.shape(), stride, padding);
    } catch (const Error& e) {
      fail("{} layer '{}': {}", op, layer, e.what());
    }
  }
  // A seam's consumer (fusion across layers: the optional in_scale, in_shift and x_applied of the
  // CBR and conv_bn contracts): the producer's scale and shift, one per input channel, and scratch
  // of the input's shape to apply them into; all three or none.
  void seam_input(const TensorArg& in_scale, const TensorArg& in_shift, const TensorArg& x_applied,
                  const TensorArg& x, int64_t channels, DType dt) const {
    if (!in_scale && !in_shift && !x_applied) return;
    if (!in_scale || !in_shift || !x_applied)
      fail("{} layer '{}': a seam's consumer binds 'in_scale', 'in_shift' and 'x_applied' together; the program "
           "binds only some (recompile it)",
           op, layer);
    per_channel(in_scale, channels, dt, "in_scale");
    per_channel(in_shift, channels, dt, "in_shift");
    like(x_applied, x.shape(), dt, "x_applied");
  }
  // Batch statistics divide by count - 1 for the running variance.
  void batch_statistics(int64_t count) const {
    if (count < 2)
      fail(
          "{} layer '{}': batch statistics need more than one value per channel, but "
          "N*H_out*W_out = 1; use a batch larger than 1 or a larger input",
          op, layer);
  }
};

}  // namespace kiln

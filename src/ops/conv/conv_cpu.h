#pragma once
// Convolution kernels on the CPU: NHWC activations, KRSC filters. fp32 runs on oneDNN where the
// build has it and cpu_kernels() chooses it (conv_onednn_cpu.h), else, and always in float64, on
// kiln's own im2col + GEMM, the reference the oneDNN kernels are tested against.
#include <cstddef>
#include <cstdint>

#include "kiln/dtype.h"

namespace kiln::cpu {

struct ConvGeom {
  int64_t n, h, w, c;   // input NHWC
  int64_t k, r, s;      // filters KRSC (C shared with input)
  int64_t stride, pad;  // same in both spatial dims
  int64_t ho, wo;       // output spatial size
  // Builds the geometry from x (N,H,W,C) and w (K,R,S,C) shapes; throws kiln::Error on mismatch.
  static ConvGeom make(const Shape& x, const Shape& w, int stride, int pad);
};

// Each kernel overwrites its outputs (gradients are not accumulated into). Bitwise
// reproducible for a fixed thread count.
template <class T>
void conv_fwd(const ConvGeom& g, const T* x, const T* w, const T* bias /*nullable*/, T* y);
template <class T>
void conv_dgrad(const ConvGeom& g, const T* dy, const T* w, T* dx);
template <class T>
void conv_wgrad(const ConvGeom& g, const T* dy, const T* x, T* dw, T* dbias /*nullable*/);

// The passes of a convolution an op runs, for conv_prepare.
struct ConvPasses {
  bool forward = false, dgrad = false, wgrad = false;
};
// Called when the program is prepared, so that no step pays for it: makes what the kernels of
// `passes` need for g in dtype `dt` (oneDNN's primitives, JIT-compiled, for fp32 on oneDNN;
// nothing for the reference kernels or float64) and returns the scratch bytes the largest of
// those passes takes from the op's scratch (core/op_scratch.h), which the op's prepare hook
// requests from the backend (Backend::request_workspace).
size_t conv_prepare(const ConvGeom& g, DType dt, bool bias, ConvPasses passes);

// Upper bound on the im2col scratch a conv call uses (default 64 MB): the batch is processed
// in chunks of images whose unrolled patches fit in it (at least one image per chunk). Tests
// lower it to exercise chunking.
void set_conv_workspace_limit(size_t bytes);
size_t conv_workspace_limit();

}  // namespace kiln::cpu

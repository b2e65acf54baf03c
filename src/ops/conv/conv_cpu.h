#pragma once
// Convolution kernels on the CPU: NHWC activations, KRSC filters of C / groups channels, any
// window (core/conv_window.h: strides, the padding of each side, dilation, groups). fp32 runs on
// oneDNN where the build has it and cpu_kernels() chooses it (conv_onednn_cpu.h), else, and always
// in float64, on kiln's own im2col + GEMM (a direct loop for depthwise convolutions), the
// reference the oneDNN kernels are tested against.
#include <cstddef>
#include <cstdint>

#include "core/conv_window.h"
#include "kiln/dtype.h"

namespace kiln::cpu {

struct ConvGeom {
  int64_t n, h, w, c;  // input NHWC
  int64_t k, r, s;     // filters (K, R, S, C / groups)
  ConvWindow win;      // strides, padding of each side, dilation, groups
  int64_t cg, kg;      // input and output channels of one group: C / groups, K / groups
  int64_t ho, wo;      // output spatial size
  // Builds the geometry from x (N,H,W,C) and w (K,R,S,C/groups) shapes; throws kiln::Error naming
  // the problem and its fix on a mismatch (groups not dividing C or K, a filter of other than
  // C/groups channels, a stride or dilation below 1, negative padding, a dilated filter larger
  // than the padded input, ...).
  static ConvGeom make(const Shape& x, const Shape& w, const ConvWindow& win);
  // A square window: one stride, `pad` on every side, no dilation, one group (the fused CBR and
  // conv_bn ops).
  static ConvGeom make(const Shape& x, const Shape& w, int stride, int pad);

  int64_t groups() const { return win.groups; }
  // Depthwise: one input channel per group (groups == C > 1), each output channel reading one
  // input channel (K / C of them per input channel, the depth multiplier).
  bool depthwise() const { return cg == 1 && win.groups > 1; }
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

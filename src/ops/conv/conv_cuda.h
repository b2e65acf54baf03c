#pragma once
// Shared by the CUDA ops that run convolutions (conv, CBR, block ends): the cuDNN problem of an
// op's tensors.
#include "core/conv_window.h"
#include "ops/conv/conv_shape_cuda.h"
#include "runtime/cuda/cudnn_graphs.h"
#include "runtime/op_call.h"

namespace kiln::cuda {

// x: (N,H,W,C) activation (or its gradient dx), w: (K,R,S,C/groups) filter (or its gradient dw);
// window: the contract's. y: the convolution's (N,Ho,Wo,K) side (y, dy or CBR's conv_out), whose
// shape is checked against the problem; an absent TensorArg{} skips that. Errors name the op
// through call.where().
ConvProblem conv_problem(const OpCall& call, const TensorArg& x, const TensorArg& w, const TensorArg& y,
                         const ConvWindow& window);
// The same for the fused ops' square windows (CBR, conv_bn: one stride, one padding).
inline ConvProblem conv_problem(const OpCall& call, const TensorArg& x, const TensorArg& w, const TensorArg& y,
                                int stride, int padding) {
  return conv_problem(call, x, w, y, ConvWindow::square(stride, padding));
}

// The problem as kiln's own convolution kernels take it. They run square windows only (one
// stride, one padding on every side, no dilation, one group): any other is a kiln::Error, so no
// hand-written kernel ever sees a window it would misread. Their callers (CBR, conv_bn) only ever
// build square problems; the plain convolution runs every window through cuDNN.
ConvShape conv_shape(const ConvProblem& p);

// A problem of kiln's own kernels (e.g. a folded convolution, tap_fold_cuda.h) as cuDNN takes it.
inline ConvProblem conv_problem_of(const ConvShape& s) {
  ConvProblem p;
  p.n = s.n, p.h = s.h, p.w = s.w, p.c = s.c, p.k = s.k, p.r = s.r, p.s = s.s;
  p.win = ConvWindow::square(int(s.stride), int(s.pad));
  p.ho = s.ho, p.wo = s.wo, p.io = s.io;
  return p;
}

// Rounds up to 256 bytes, the alignment every carved workspace piece keeps.
inline size_t workspace_align(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace kiln::cuda

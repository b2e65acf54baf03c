#pragma once
// Shared by the CUDA ops that run convolutions (conv, CBR, block ends): the cuDNN problem of an
// op's tensors.
#include "ops/conv/conv_shape_cuda.h"
#include "runtime/cuda/cudnn_graphs.h"
#include "runtime/op_call.h"

namespace kiln::cuda {

// x: (N,H,W,C) activation (or its gradient dx), w: (K,R,S,C) filter (or its gradient dw);
// stride/padding: the contract's attributes. y: the convolution's (N,Ho,Wo,K) side (y, dy or
// CBR's conv_out), whose shape is checked against the problem; an absent TensorArg{} skips that.
// Errors name the op through call.where().
ConvProblem conv_problem(const OpCall& call, const TensorArg& x, const TensorArg& w, const TensorArg& y, int stride,
                         int padding);

// The problem as kiln's own convolution kernels take it.
inline ConvShape conv_shape(const ConvProblem& p) {
  return {p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.stride, p.pad, p.ho, p.wo, p.io};
}

// A problem of kiln's own kernels (e.g. a folded convolution, tap_fold_cuda.h) as cuDNN takes it.
inline ConvProblem conv_problem_of(const ConvShape& s) {
  ConvProblem p;
  p.n = s.n, p.h = s.h, p.w = s.w, p.c = s.c, p.k = s.k, p.r = s.r, p.s = s.s, p.stride = s.stride, p.pad = s.pad;
  p.ho = s.ho, p.wo = s.wo, p.io = s.io;
  return p;
}

// Rounds up to 256 bytes, the alignment every carved workspace piece keeps.
inline size_t workspace_align(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace kiln::cuda

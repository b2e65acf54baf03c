#pragma once
// fp32 convolutions on oneDNN (conv_onednn_cpu.cpp), for the CPU kernels of conv_cpu.h when
// cpu_kernels() is oneDNN, on any window: groups (grouped filter layouts), dilation and the padding
// of each side go to oneDNN as they are. Each returns false, having done nothing, where oneDNN does
// not run the problem: a build without oneDNN, the reference kernels chosen, a problem oneDNN
// has only its slow reference implementation for, or the weight gradient of a depthwise window
// larger than 3x3, which kiln's own loops run faster (then conv_cpu.h's own kernel runs it).
//
// Threads and determinism: the batch is cut into pieces of images whose size depends on the
// problem alone (never on the thread count); kiln's pool runs the pieces, each through oneDNN on
// one thread; wgrad sums the pieces' partial gradients in piece order (a filter too big for many
// partial gradients gets few pieces, each cut into slices of output channels, also fixed by the
// problem; grouped filters, small, are not sliced). So the bytes do not depend
// on the thread count, as kiln/threads.h promises, and `--threads` and a pool shared by two runs
// hold. (kiln's oneDNN, PyPI's GNU OpenMP build, runs its own threads on OpenMP, not on a threadpool
// kiln can hand it.)
#include "ops/conv/conv_cpu.h"

namespace kiln::cpu {

bool onednn_conv_fwd(const ConvGeom& g, const float* x, const float* w, const float* bias, float* y);
bool onednn_conv_dgrad(const ConvGeom& g, const float* dy, const float* w, float* dx);
bool onednn_conv_wgrad(const ConvGeom& g, const float* dy, const float* x, float* dw, float* dbias);

// Makes the primitives of `passes` for g now (conv_prepare), where oneDNN runs them; the calls
// above find them made. Without it they are made on first use. Returns the scratch bytes the
// largest pass takes (its filters in oneDNN's layout, each task's scratchpad, wgrad's partial
// sums): the calls above take them from the op's scratch (core/op_scratch.h) where it holds them,
// else from a buffer of the calling thread's that grows.
size_t onednn_conv_prepare(const ConvGeom& g, bool bias, ConvPasses passes);
// How many times the calls above found the op's scratch too small and used their own buffer
// instead (a kernel called outside an op, or an op whose prepare hook did not ask), for tests.
int64_t onednn_scratch_fallbacks();
// How many primitives this process has made (each once per problem), for tests.
int64_t onednn_primitives_made();

}  // namespace kiln::cpu

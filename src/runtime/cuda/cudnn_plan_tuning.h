#pragma once
// Plan choice by autotuning: build the plans cuDNN's heuristics offer for a defined graph (minus
// TF32 or nondeterministic ones as the options say), time them on random device buffers, keep the
// fastest. Only the cudnn_*.cpp files of this folder include this header (it pulls in
// cudnn_frontend.h through cudnn_graph_defs.h).
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <vector>

#include "runtime/cuda/cudnn_graph_defs.h"

namespace kiln::cuda::detail {

// validate → operation graph → heuristics (A + FALLBACK) → check_support → build → time → keep best.
// With tuning off the heuristics' first usable plan is kept untimed. `uids_out` receives the
// variant pack's user tensors in the order execute wants them. Not supported (why_not set) when no
// plan builds or runs; never throws for the frontend's failures.
PlanChoice choose_plan(NotedGraph& g, cudnnHandle_t handle, cudaStream_t stream, DType io,
                       const CudnnGraphsOptions& o, std::vector<int64_t>& uids_out);

}  // namespace kiln::cuda::detail

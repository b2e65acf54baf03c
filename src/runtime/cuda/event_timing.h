#pragma once
// Timing GPU work with CUDA events, for the choices made at prepare (cuDNN's plan tuning, and
// kiln's kernels against cuDNN's plans).
#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace kiln::cuda {

// The median, in ms, of `runs` runs of `enqueue` on `stream`, each between two CUDA events,
// after one untimed warm-up run. `enqueue` returns false when the work could not be enqueued;
// the result is then -1. The events are released on every path, errors included.
double median_event_ms(cudaStream_t stream, int runs, const std::function<bool()>& enqueue, const std::string& where);

}  // namespace kiln::cuda

#pragma once
// How many batch slices a backward op cuts its data gradient into, so that slice i's
// convolution (side stream) overlaps the memory-bound work that produces slice i+1 (main stream).
// Pure host logic, shared by the CUDA ops and tested on the CPU.
#include <cstddef>
#include <cstdint>

namespace kiln {

struct SliceQuery {
  int64_t batch = 0;                // N
  int64_t grad_sample_elems = 0;    // elements of one sample of the gradient being sliced (dconv)
  int64_t input_sample_elems = 0;   // elements of one sample of the data gradient (dX)
  size_t elem_bytes = 2;            // bytes per element of both
  int requested = 0;                // 0: choose by size; 1: no slicing; k > 1: at most k slices
  bool hazard = false;              // buffers overlap so that slices may not interleave
};

// Bytes of gradient from which slicing pays for itself when the op chooses (requested == 0),
// and from which four slices do better than two. Measured on an H200 (docs/results.md): two
// slices cost ~1% at 103 MB, four gain 1-2% from 411 MB; in between it is within noise.
inline constexpr size_t kMinSlicedGradBytes = size_t{160} << 20;
inline constexpr size_t kFourSlicesGradBytes = size_t{320} << 20;
inline constexpr int kMaxAutoSlices = 4;

// The slice count to use (>= 1): the largest count not above the request (or the automatic
// choice) that divides the batch evenly and keeps every slice start 16-byte aligned in both
// tensors and on a whole byte of a 1-bit-per-element mask of the gradient. 1 on any hazard.
int pipeline_slices(const SliceQuery& q);

}  // namespace kiln

#pragma once
// How many batch slices a backward op cuts its data gradient into, so that slice i's
// convolution (side stream) can overlap the memory-bound work that produces slice i+1 (main
// stream). Pure host logic, shared by the CUDA ops and tested on the CPU.
//
// Slicing is off unless asked for (KILN_PIPELINE_CHUNKS): on an H200 at batch 256 the CBR block
// gained 0-3% in one run and lost up to 1% in another (docs/results.md), within run-to-run
// noise, because the convolutions leave the memory-bound pass few free SMs.
#include <cstddef>
#include <cstdint>

namespace kiln {

struct SliceQuery {
  int64_t batch = 0;                // N
  int64_t grad_sample_elems = 0;    // elements of one sample of the gradient being sliced (dconv)
  int64_t input_sample_elems = 0;   // elements of one sample of the data gradient (dX)
  size_t elem_bytes = 2;            // bytes per element of both
  int requested = 0;                // 0 or 1: no slicing; k > 1: at most k slices
  bool hazard = false;              // buffers overlap so that slices may not interleave
};

// The slice count to use (>= 1): the largest count not above the request that divides the batch
// evenly and keeps every slice start 16-byte aligned in both tensors and on a whole byte of a
// 1-bit-per-element mask of the gradient. 1 on any hazard.
int pipeline_slices(const SliceQuery& q);

}  // namespace kiln

#pragma once
// Data parallel: which gradients are averaged over the ranks together, and when. The gradients of
// a program lie in one or two contiguous regions (Program::grad_region, compute_grad_region); the
// backward writes them roughly from the last layer's to the first's. A bucket is a run of
// neighbouring gradients of one region, about `bucket_bytes` long, averaged as one collective as
// soon as the last backward op that writes any of them has been issued: the averages of the late
// layers then overlap the backward of the early ones.
#include <cstddef>
#include <vector>

#include "kiln/program.h"

namespace kiln {

struct GradientBucket {
  int region = -1;          // the tensor id of the region (grad_region or compute_grad_region)
  size_t offset = 0;        // bytes into the region
  size_t count = 0;         // elements of the region's dtype
  DType dtype = DType::F32;
  int ready_after = -1;     // the index in Program::backward of the last op writing into the bucket
  std::vector<int> grads;   // the gradient tensors it holds (Program::grads entries)
};

// DistributedDataParallel's default bucket size, which its authors measured as a good balance of
// overlap (small buckets start early) against per-collective cost (large buckets move faster).
inline constexpr size_t kDefaultBucketBytes = size_t(25) << 20;

// The buckets of `program`, ordered by ready_after (then by offset, highest first): the order every
// rank issues them in. Every byte of the gradient regions from the first gradient's start to the
// last one's end is in exactly one bucket (padding between gradients included: it is zeros).
// A gradient that no backward op writes is ready after the last op.
std::vector<GradientBucket> plan_gradient_buckets(const Program& program, size_t bucket_bytes = kDefaultBucketBytes);

}  // namespace kiln

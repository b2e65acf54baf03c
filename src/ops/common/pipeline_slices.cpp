#include "ops/common/pipeline_slices.h"

namespace kiln {
namespace {

bool slice_starts_aligned(const SliceQuery& q, int64_t samples_per_slice) {
  const int64_t grad_elems = samples_per_slice * q.grad_sample_elems;
  const size_t grad_bytes = size_t(grad_elems) * q.elem_bytes;
  const size_t input_bytes = size_t(samples_per_slice * q.input_sample_elems) * q.elem_bytes;
  return grad_elems % 8 == 0 && grad_bytes % 16 == 0 && input_bytes % 16 == 0;
}

}  // namespace

int pipeline_slices(const SliceQuery& q) {
  if (q.hazard || q.batch < 2 || q.grad_sample_elems <= 0 || q.input_sample_elems <= 0) return 1;
  const int want = q.requested > q.batch ? int(q.batch) : q.requested;
  for (int k = want; k > 1; --k)
    if (q.batch % k == 0 && slice_starts_aligned(q, q.batch / k)) return k;
  return 1;
}

}  // namespace kiln

#include "ops/common/flat_cuda.cuh"
#include "ops/loss_scale/loss_scale_cuda.h"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

// Each functor handles the 8 elements [i0, i0 + 8) clipped to n (see flat_cuda.cuh).

// inf and NaN are the floats whose exponent bits are all ones (a bit test, whatever math flags
// the build uses).
__device__ __forceinline__ bool nonfinite(float v) { return (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u; }

struct FindNonFinite {
  const float* x;
  int32_t* found;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float v[8];
    load8(x, i0, n, vec, v);  // elements past n load as 0
    bool bad = false;
#pragma unroll
    for (int j = 0; j < 8; ++j) bad |= nonfinite(v[j]);
    if (bad) *found = 1;  // every writer stores the same value
  }
};

__global__ void update_loss_scale_kernel(const int32_t* found, float* scale, int32_t* clean_steps,
                                         loss_scale::Rule rule) {
  loss_scale::update(*found != 0, *scale, *clean_steps, rule);
}

}  // namespace

void find_nonfinite(const float* x, int64_t n, int32_t* found, cudaStream_t stream, const std::string& where) {
  if (!found || (n > 0 && !x)) fail("{}: find_nonfinite got a null gradient region or flag", where);
  KILN_CUDA(cudaMemsetAsync(found, 0, sizeof(int32_t), stream), where);
  launch_flat(FindNonFinite{x, found}, n, flat_vectorizable({x}), stream, where);
}

void update_loss_scale(const int32_t* found, float* scale, int32_t* clean_steps, const loss_scale::Rule& rule,
                       cudaStream_t stream, const std::string& where) {
  if (!found || !scale || !clean_steps) fail("{}: update_loss_scale got a null state tensor", where);
  update_loss_scale_kernel<<<1, 1, 0, stream>>>(found, scale, clean_steps, rule);
  check_launch(where);
}

}  // namespace kiln::cuda

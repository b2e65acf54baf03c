#include <type_traits>

#include "ops/common/flat_cuda.cuh"
#include "ops/loss_scale/loss_scale_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

// Each functor handles the 8 elements [i0, i0 + 8) clipped to n (see flat_cuda.cuh).

// inf and NaN are the floats whose exponent bits are all ones (a bit test, whatever math flags
// the build uses).
__device__ __forceinline__ bool nonfinite(float v) { return (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u; }

// Elements [0, prefix) are compute.data's (C: its element type, void without it), the rest x's,
// from x[0]. prefix is a multiple of 8, so no group reads both.
template <class C>
struct FindNonFinite {
  const float* x;
  const C* compute;
  int64_t prefix;
  int32_t* found;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float v[8];  // elements past the end load as 0
    if constexpr (!std::is_void_v<C>) {
      if (i0 < prefix)
        load8(compute, i0, prefix, vec, v);
      else
        load8(x, i0 - prefix, n - prefix, vec, v);
    } else {
      load8(x, i0, n, vec, v);
    }
    bool bad = false;
#pragma unroll
    for (int j = 0; j < 8; ++j) bad |= nonfinite(v[j]);  // fp16/bf16 inf and NaN stay so in fp32
    if (bad) *found = 1;  // every writer stores the same value
  }
};

__global__ void update_loss_scale_kernel(const int32_t* found, float* scale, int32_t* clean_steps,
                                         loss_scale::Rule rule) {
  loss_scale::update(*found != 0, *scale, *clean_steps, rule);
}

}  // namespace

void find_nonfinite(const float* x, int64_t n, int32_t* found, cudaStream_t stream, const std::string& where,
                    ComputeGrads compute) {
  if (!found || (n > 0 && !x)) fail("{}: find_nonfinite got a null gradient region or flag", where);
  if (compute.n < 0 || (compute.n > 0 && !compute.data))
    fail("{}: find_nonfinite got a null compute gradient region of {} elements", where, compute.n);
  if (compute.n % 8 != 0 && n > 0)
    fail("{}: find_nonfinite got {} compute gradients, not a multiple of 8, before the fp32 ones", where, compute.n);
  KILN_CUDA(cudaMemsetAsync(found, 0, sizeof(int32_t), stream), where);
  if (compute.n == 0) {
    launch_flat(FindNonFinite<void>{x, nullptr, 0, found}, n, flat_vectorizable({x}), stream, where);
    return;
  }
  dispatch_activation(compute.dtype, "find_nonfinite (compute gradients)", [&](auto zero) {
    using C = decltype(zero);
    const FindNonFinite<C> op{x, static_cast<const C*>(compute.data), compute.n, found};
    launch_flat(op, compute.n + n, flat_vectorizable({x, compute.data}), stream, where);
  });
}

void update_loss_scale(const int32_t* found, float* scale, int32_t* clean_steps, const loss_scale::Rule& rule,
                       cudaStream_t stream, const std::string& where) {
  if (!found || !scale || !clean_steps) fail("{}: update_loss_scale got a null state tensor", where);
  update_loss_scale_kernel<<<1, 1, 0, stream>>>(found, scale, clean_steps, rule);
  check_launch(where);
}

}  // namespace kiln::cuda

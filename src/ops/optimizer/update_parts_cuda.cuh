#pragma once
// What every fused optimizer update on the GPU shares (optimizer_cuda.cu, rmsprop_cuda.cu): where
// a group of 8 elements reads its gradients and writes its rounded copy in mixed precision, the
// loss-scaling skip, the dispatch over the compute dtype and the host's checks of the regions.
// Included only by .cu files.
#include <initializer_list>
#include <string>
#include <type_traits>

#include "kiln/error.h"
#include "ops/common/flat_cuda.cuh"
#include "ops/optimizer/optimizer_cuda.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {

// Where a group of 8 elements takes its gradients and leaves its rounded copy (ComputeCopies):
// C is the compute dtype's element type, void without compute tensors. A group never straddles
// the prefix's end (a multiple of 8), so each group reads one region.
template <class C>
struct GradSource {
  const float* fp32;  // elements [shift, n), shift = prefix where `compute` is given, else 0
  const C* compute;   // elements [0, prefix); nullptr: none
  C* copy;            // elements [0, prefix); nullptr: none
  int64_t prefix;
  __device__ __forceinline__ void load(int64_t i0, int64_t n, bool vec, float (&g)[8]) const {
    if constexpr (!std::is_void_v<C>) {
      if (compute) {
        if (i0 < prefix) return load8(compute, i0, prefix, vec, g);
        return load8(fp32, i0 - prefix, n - prefix, vec, g);
      }
    }
    load8(fp32, i0, n, vec, g);
  }
  __device__ __forceinline__ void store_copy(int64_t i0, bool vec, const float (&p)[8]) const {
    if constexpr (!std::is_void_v<C>) {
      if (copy && i0 < prefix) store8(copy, i0, prefix, vec, p);
    }
  }
  // The same for a group clipped to `end`, the end of one parameter tensor (LARS walks tensor by
  // tensor), which lies wholly inside the prefix or wholly past it.
  __device__ __forceinline__ void load_until(int64_t i0, int64_t end, bool vec, float (&g)[8]) const {
    if constexpr (!std::is_void_v<C>) {
      if (compute) {
        if (i0 < prefix) return load8(compute, i0, end, vec, g);
        return load8(fp32, i0 - prefix, end - prefix, vec, g);
      }
    }
    load8(fp32, i0, end, vec, g);
  }
  __device__ __forceinline__ void store_copy_until(int64_t i0, int64_t end, bool vec, const float (&p)[8]) const {
    if constexpr (!std::is_void_v<C>) {
      if (copy && i0 < prefix) store8(copy, i0, end, vec, p);
    }
  }
};

// Loss scaling: false when the step is skipped; else `inv` is what gradients are multiplied by.
__device__ __forceinline__ bool take_step(const LossScaleInputs& scaling, float& inv) {
  if (scaling.found_nonfinite && *scaling.found_nonfinite != 0) return false;
  inv = scaling.scale ? 1.f / *scaling.scale : 1.f;
  return true;
}

// Every region the update names (`required`) bound, for n >= 0 elements.
inline void check_regions(const char* fn, int64_t n, std::initializer_list<const void*> required,
                   const std::string& where) {
  if (n < 0) fail("{}: {} got n = {} parameters; n must be >= 0", where, fn, n);
  for (const void* p : required)
    if (n > 0 && !p)
      fail(
          "{}: {} got a nullptr region (gradient, parameter or optimizer state); bind every "
          "region of the update",
          where, fn);
}

// The gradients: the compute prefix within [0, n) at a group boundary, and an fp32 region
// wherever the compute gradients do not cover every element.
inline void check_gradients(const char* fn, int64_t n, const float* grad, const ComputeCopies& compute,
                     const std::string& where) {
  const int64_t prefix = compute.prefix;
  if (prefix < 0 || prefix > n) fail("{}: {} got a compute prefix of {} elements of {}", where, fn, prefix, n);
  if (prefix % 8 != 0 && prefix != n)
    fail("{}: {} got a compute prefix of {} elements, not a multiple of 8 (nor all {})", where, fn, prefix, n);
  if ((compute.grad || compute.param) && prefix == 0)
    fail("{}: {} got compute tensors for an empty prefix", where, fn);
  const int64_t fp32_elements = compute.grad ? n - prefix : n;
  if (fp32_elements > 0 && !grad)
    fail("{}: {} got no fp32 gradients for the {} elements the compute gradients do not cover", where, fn,
         fp32_elements);
}

// Calls f(GradSource<C>) with the compute tensors' element type C, or C = void without them.
template <class F>
void dispatch_compute(const float* grad, const ComputeCopies& compute, const char* fn, F&& f) {
  if (!compute.grad && !compute.param) return f(GradSource<void>{grad, nullptr, nullptr, 0});
  dispatch_activation(compute.dtype, fn, [&](auto zero) {
    using C = decltype(zero);
    f(GradSource<C>{grad, static_cast<const C*>(compute.grad), static_cast<C*>(compute.param), compute.prefix});
  });
}

}  // namespace kiln::cuda

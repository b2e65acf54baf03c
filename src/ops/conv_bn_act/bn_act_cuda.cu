#include "ops/common/flat_cuda.cuh"
#include "ops/conv_bn_act/bn_act_cuda.h"
#include "ops/conv_bn_act/bn_act_functions.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

// Eight consecutive elements of an (m, c) tensor: element i's channel is i % c, found once a group.
template <class F, class T>
struct Apply {
  const T* x;
  const float *scale, *shift;
  T* y;
  int64_t c;
  float alpha;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float v[8];
    load8(x, i0, n, vec, v);
    int64_t ch = i0 % c;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      v[j] = F::value(fmaf(v[j], scale[ch], shift[ch]), alpha);
      ch = ch + 1 == c ? 0 : ch + 1;
    }
    store8(y, i0, n, vec, v);
  }
};

void check(const char* fn, int64_t m, int64_t c, std::initializer_list<const void*> pointers,
           const std::string& where) {
  if (m < 0 || c <= 0) fail("{}: {} got {} rows of {} channels; it needs m >= 0 and c > 0", where, fn, m, c);
  for (const void* p : pointers)
    if (m > 0 && !p) fail("{}: {} got a null device pointer", where, fn);
}

}  // namespace

void bn_act_apply(DType dtype, int activation, float alpha, const void* x, const float* scale, const float* shift,
                  int64_t m, int64_t c, void* y, cudaStream_t stream, const std::string& where) {
  check("bn_act_apply", m, c, {x, scale, shift, y}, where);
  if (m == 0) return;
  bn_act::visit(activation, [&](auto fn) {
    using F = decltype(fn);
    dispatch_activation(dtype, "bn_act_apply", [&](auto zero) {
      using T = decltype(zero);
      const Apply<F, T> op{static_cast<const T*>(x), scale, shift, static_cast<T*>(y), c, alpha};
      launch_flat(op, m * c, flat_vectorizable({x, y}), stream, where);
    });
    return 0;
  });
}

}  // namespace kiln::cuda

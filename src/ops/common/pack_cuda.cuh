#pragma once
// Device helpers shared by the memory-bound CUDA kernels (batchnorm, elementwise, CBR,
// optimizer): packed vector loads/stores, activation <-> fp32 conversions, alignment checks.
// Included only by .cu files.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace kiln::cuda {

// --- Activation types <-> fp32 (all arithmetic is done in fp32) ---
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
// bf16 is the top half of an fp32: widening is a shift of the raw bits.
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __uint_as_float(static_cast<unsigned>(__bfloat16_as_ushort(v)) << 16);
}

template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// --- Packs: N consecutive elements moved with the widest aligned accesses (<= 16 bytes each) ---
constexpr size_t pack_alignment(size_t bytes) { return bytes >= 16 ? 16 : bytes; }

template <class T, int N>
struct alignas(pack_alignment(N * sizeof(T))) Pack {
  T v[N];
};

// p must be aligned to pack_alignment(N * sizeof(T)). Plain (coherent) loads: callers' outputs
// may alias their inputs, so read-only cache paths (__ldg) are not safe in general.
template <class T, int N>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T, N>*>(p);
}

// The same load marked evict-first (ld.global.cs): for a stream read once, so that it does not
// push out of L2 what other kernels still read.
template <class T, int N>
__device__ __forceinline__ Pack<T, N> load_pack_streaming(const T* p) {
  constexpr size_t bytes = sizeof(Pack<T, N>);
  Pack<T, N> out;
  if constexpr (bytes == 16) {
    *reinterpret_cast<uint4*>(&out) = __ldcs(reinterpret_cast<const uint4*>(p));
  } else if constexpr (bytes == 8) {
    *reinterpret_cast<uint2*>(&out) = __ldcs(reinterpret_cast<const uint2*>(p));
  } else if constexpr (bytes == 4) {
    *reinterpret_cast<unsigned*>(&out) = __ldcs(reinterpret_cast<const unsigned*>(p));
  } else {
    out = load_pack<T, N>(p);
  }
  return out;
}

template <class T, int N>
__device__ __forceinline__ void store_pack(T* p, const Pack<T, N>& pack) {
  *reinterpret_cast<Pack<T, N>*>(p) = pack;
}

// --- Host-side launch helpers ---
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// True when every non-null pointer is a multiple of `bytes`.
inline bool all_aligned(std::initializer_list<const void*> ptrs, size_t bytes) {
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % bytes != 0) return false;
  return true;
}

}  // namespace kiln::cuda

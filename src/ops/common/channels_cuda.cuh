#pragma once
// Channels-last kernels' access to V consecutive channels of one pixel as fp32 (pool, mul): one
// packed load or store of at most 16 bytes, V = 1 a plain scalar access. Included only by .cu files.
#include "ops/common/pack_cuda.cuh"

namespace kiln::cuda {

// The widest channel group one thread moves: 16 bytes.
template <class T>
constexpr int kWide = static_cast<int>(16 / sizeof(T));

template <int V, class T>
__device__ __forceinline__ void load_channels(const T* p, float (&out)[V]) {
  const Pack<T, V> pk = load_pack<T, V>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = to_float(pk.v[j]);
}

template <int V, class T>
__device__ __forceinline__ void store_channels(T* p, const float (&v)[V]) {
  Pack<T, V> pk;
#pragma unroll
  for (int j = 0; j < V; ++j) pk.v[j] = from_float<T>(v[j]);
  store_pack<T, V>(p, pk);
}

}  // namespace kiln::cuda

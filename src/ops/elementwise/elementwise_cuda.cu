#include <algorithm>
#include <initializer_list>

#include "core/random.h"
#include "ops/common/flat_cuda.cuh"
#include "ops/elementwise/elementwise_cpu.h"  // dropout_stream: the CPU's mask streams
#include "ops/elementwise/elementwise_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

// Each functor handles the 8 elements [i0, i0 + 8) clipped to n (see flat_cuda.cuh).

template <class T>
struct ReluForward {
  const T* x;
  T* y;
  uint8_t* mask;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float v[8], out[8];
    uint8_t m[8];
    load8(x, i0, n, vec, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      out[j] = v[j] < 0.f ? 0.f : v[j];  // NaN stays NaN
      m[j] = v[j] > 0.f;
    }
    store8(y, i0, n, vec, out);
    if (mask) store8(mask, i0, n, vec, m);
  }
};

// dx = mask ? dy * scale : 0: the backward of ReLU (scale 1, exact) and of dropout.
template <class T>
struct MaskedBackward {
  const T* dy;
  const uint8_t* mask;
  T* dx;
  float scale;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float g[8];
    uint8_t m[8];
    load8(dy, i0, n, vec, g);
    load8(mask, i0, n, vec, m);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] = m[j] ? g[j] * scale : 0.f;
    store8(dx, i0, n, vec, g);
  }
};

template <class T>
struct Add {
  const T* a;
  const T* b;
  T* y;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float va[8], vb[8];
    load8(a, i0, n, vec, va);
    load8(b, i0, n, vec, vb);
#pragma unroll
    for (int j = 0; j < 8; ++j) va[j] += vb[j];
    store8(y, i0, n, vec, va);
  }
};

template <class T>
struct GradSum {
  const T* in[kGradSumMaxInputs];
  int k;
  T* sum;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float s[8], v[8];
    load8(in[0], i0, n, vec, s);
    for (int t = 1; t < k; ++t) {
      load8(in[t], i0, n, vec, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) s[j] += v[j];
    }
    store8(sum, i0, n, vec, s);
  }
};

template <class S, class D>
struct Cast {
  const S* src;
  D* dst;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float v[8];
    load8(src, i0, n, vec, v);
    store8(dst, i0, n, vec, v);
  }
};

template <class T>
struct Fill {
  T* x;
  float value;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = value;
    store8(x, i0, n, vec, v);
  }
};

// core/random.h's mix64, for the device; the GPU test checks masks bit for bit against the CPU.
template <class T>
struct DropoutForward {
  const T* x;
  T* y;
  uint8_t* mask;
  uint64_t key;  // mix64(mix64(seed) ^ stream): random_bits(seed, stream, i) = mix64(key ^ i)
  float p, scale;
  // When set, the seed and step are read here instead (a replayed CUDA Graph) and the stream
  // is the layer's: cpu::dropout_stream(layer_key, *step).
  const uint64_t* seed_on_device = nullptr;
  const int64_t* step_on_device = nullptr;
  uint64_t layer_key = 0;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float v[8];
    uint8_t m[8];
    load8(x, i0, n, vec, v);
    const uint64_t k =
        seed_on_device ? mix64(mix64(*seed_on_device) ^ cpu::dropout_stream(layer_key, *step_on_device)) : key;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint64_t bits = mix64(k ^ static_cast<uint64_t>(i0 + j));
      const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // random_uniform
      m[j] = u >= p;
      v[j] = m[j] ? v[j] * scale : 0.f;
    }
    store8(y, i0, n, vec, v);
    store8(mask, i0, n, vec, m);
  }
};

void check_n(const char* fn, int64_t n, const std::string& where) {
  if (n < 0) fail("{}: {} got n = {} elements; n must be >= 0", where, fn, n);
}

void need(const char* fn, const std::string& where,
          std::initializer_list<std::pair<const void*, const char*>> pointers) {
  for (const auto& [p, name] : pointers)
    if (!p) fail("{}: {} needs the device pointer '{}', got nullptr", where, fn, name);
}

void check_p(const char* fn, float p, const std::string& where) {
  if (!(p >= 0.f && p <= 1.f))
    fail("{}: {} got dropout probability p = {}; it must lie in [0, 1]", where, fn, p);
}

float dropout_scale(float p) { return p < 1.f ? static_cast<float>(1.0 / (1.0 - double(p))) : 0.f; }

}  // namespace

void relu_forward(DType dtype, const void* x, int64_t n, void* y, uint8_t* mask,
                  cudaStream_t stream, const std::string& where) {
  check_n("relu_forward", n, where);
  if (n == 0) return;
  need("relu_forward", where, {{x, "x"}, {y, "y"}});
  dispatch_activation(dtype, "relu_forward", [&](auto zero) {
    using T = decltype(zero);
    ReluForward<T> op{static_cast<const T*>(x), static_cast<T*>(y), mask};
    launch_flat(op, n, flat_vectorizable({x, y}, {mask}), stream, where);
  });
}

void relu_backward(DType dtype, const void* dy, const uint8_t* mask, int64_t n, void* dx,
                   cudaStream_t stream, const std::string& where) {
  check_n("relu_backward", n, where);
  if (n == 0) return;
  need("relu_backward", where, {{dy, "dy"}, {mask, "mask"}, {dx, "dx"}});
  dispatch_activation(dtype, "relu_backward", [&](auto zero) {
    using T = decltype(zero);
    MaskedBackward<T> op{static_cast<const T*>(dy), mask, static_cast<T*>(dx), 1.f};
    launch_flat(op, n, flat_vectorizable({dy, dx}, {mask}), stream, where);
  });
}

void add(DType dtype, const void* a, const void* b, int64_t n, void* y, cudaStream_t stream,
         const std::string& where) {
  check_n("add", n, where);
  if (n == 0) return;
  need("add", where, {{a, "a"}, {b, "b"}, {y, "y"}});
  dispatch_activation(dtype, "add", [&](auto zero) {
    using T = decltype(zero);
    Add<T> op{static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y)};
    launch_flat(op, n, flat_vectorizable({a, b, y}), stream, where);
  });
}

void grad_sum(DType dtype, const void* const* inputs, int k, int64_t n, void* sum,
              cudaStream_t stream, const std::string& where) {
  check_n("grad_sum", n, where);
  if (k < 1 || !inputs)
    fail("{}: grad_sum needs at least one input gradient (got k = {})", where, k);
  if (n == 0) return;
  need("grad_sum", where, {{sum, "sum"}});
  for (int t = 0; t < k; ++t)
    if (!inputs[t]) fail("{}: grad_sum input {} of {} is nullptr", where, t, k);
  dispatch_activation(dtype, "grad_sum", [&](auto zero) {
    using T = decltype(zero);
    // Pass 1 adds inputs[0 .. 15]; each later pass adds up to 15 more onto the running sum.
    for (int first = 0; first < k;) {
      GradSum<T> op{};
      op.sum = static_cast<T*>(sum);
      bool vec = flat_vectorizable({sum});
      if (first > 0) op.in[op.k++] = static_cast<const T*>(sum);
      while (op.k < kGradSumMaxInputs && first < k) {
        vec = vec && flat_vectorizable({inputs[first]});
        op.in[op.k++] = static_cast<const T*>(inputs[first++]);
      }
      launch_flat(op, n, vec, stream, where);
    }
  });
}

void cast(DType src_dtype, const void* src, DType dst_dtype, void* dst, int64_t n,
          cudaStream_t stream, const std::string& where) {
  check_n("cast", n, where);
  if (n == 0) return;
  need("cast", where, {{src, "src"}, {dst, "dst"}});
  if (src_dtype == dst_dtype) {
    if (src != dst)
      KILN_CUDA(
          cudaMemcpyAsync(dst, src, n * dtype_size(src_dtype), cudaMemcpyDeviceToDevice, stream),
          where);
    return;
  }
  dispatch_activation(src_dtype, "cast (source)", [&](auto s) {
    dispatch_activation(dst_dtype, "cast (destination)", [&](auto d) {
      using S = decltype(s);
      using D = decltype(d);
      Cast<S, D> op{static_cast<const S*>(src), static_cast<D*>(dst)};
      launch_flat(op, n, flat_vectorizable({src, dst}), stream, where);
    });
  });
}

void fill(DType dtype, void* x, int64_t n, float value, cudaStream_t stream,
          const std::string& where) {
  check_n("fill", n, where);
  if (n == 0) return;
  need("fill", where, {{x, "x"}});
  dispatch_activation(dtype, "fill", [&](auto zero) {
    using T = decltype(zero);
    Fill<T> op{static_cast<T*>(x), value};
    launch_flat(op, n, flat_vectorizable({x}), stream, where);
  });
}

void dropout_forward(DType dtype, const void* x, int64_t n, float p, uint64_t seed,
                     uint64_t random_stream, void* y, uint8_t* mask, cudaStream_t stream,
                     const std::string& where) {
  check_n("dropout_forward", n, where);
  check_p("dropout_forward", p, where);
  if (n == 0) return;
  need("dropout_forward", where, {{x, "x"}, {y, "y"}, {mask, "mask"}});
  dispatch_activation(dtype, "dropout_forward", [&](auto zero) {
    using T = decltype(zero);
    DropoutForward<T> op{
        static_cast<const T*>(x), static_cast<T*>(y), mask, mix64(mix64(seed) ^ random_stream), p,
        dropout_scale(p)};
    launch_flat(op, n, flat_vectorizable({x, y}, {mask}), stream, where);
  });
}

void dropout_forward(DType dtype, const void* x, int64_t n, float p, const uint64_t* seed, const int64_t* step,
                     uint64_t layer_key, void* y, uint8_t* mask, cudaStream_t stream, const std::string& where) {
  check_n("dropout_forward", n, where);
  check_p("dropout_forward", p, where);
  if (n == 0) return;
  need("dropout_forward", where, {{x, "x"}, {y, "y"}, {mask, "mask"}, {seed, "seed"}, {step, "step"}});
  dispatch_activation(dtype, "dropout_forward", [&](auto zero) {
    using T = decltype(zero);
    DropoutForward<T> op{static_cast<const T*>(x), static_cast<T*>(y), mask, 0, p, dropout_scale(p), seed, step,
                         layer_key};
    launch_flat(op, n, flat_vectorizable({x, y}, {mask}), stream, where);
  });
}

void dropout_backward(DType dtype, const void* dy, const uint8_t* mask, int64_t n, float p,
                      void* dx, cudaStream_t stream, const std::string& where) {
  check_n("dropout_backward", n, where);
  check_p("dropout_backward", p, where);
  if (n == 0) return;
  need("dropout_backward", where, {{dy, "dy"}, {mask, "mask"}, {dx, "dx"}});
  dispatch_activation(dtype, "dropout_backward", [&](auto zero) {
    using T = decltype(zero);
    MaskedBackward<T> op{static_cast<const T*>(dy), mask, static_cast<T*>(dx), dropout_scale(p)};
    launch_flat(op, n, flat_vectorizable({dy, dx}, {mask}), stream, where);
  });
}

}  // namespace kiln::cuda

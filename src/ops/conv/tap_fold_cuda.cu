#include "ops/conv/tap_fold_cuda.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "kiln/error.h"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

// The fold of one problem: taps per channel group (bh, bw) and the folded filter's taps (ah, aw).
struct Fold {
  int64_t bh, bw, ah, aw;
  int64_t used;      // C·bh·bw channels that carry values
  int64_t channels;  // used, rounded up to a multiple of 8
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

Fold fold_of(const ConvShape& p, TapFold f) {
  Fold d{};
  d.bh = f == TapFold::kWhole ? p.r : p.stride;
  d.bw = f == TapFold::kByStride ? p.stride : p.s;
  d.ah = ceil_div(p.r, d.bh);
  d.aw = ceil_div(p.s, d.bw);
  d.used = p.c * d.bh * d.bw;
  d.channels = ceil_div(d.used, 8) * 8;
  return d;
}

// Where the folded input reads channel cf of pixel (u, v): -1 where it holds a zero.
struct Source {
  int64_t bh, bw, c;
};
__device__ Source source_of(int64_t cf, const Fold& d, int64_t c_count) {
  const int64_t group = cf / c_count;
  return {group / d.bw, group - group / d.bw * d.bw, cf - group * c_count};
}

// One thread writes V neighbouring channels of one folded pixel (16 bytes: a vector store).
template <class T>
__global__ void fold_input_kernel(const T* __restrict__ x, T* __restrict__ xf, ConvShape p, Fold d, int64_t hf,
                                  int64_t wf, int64_t threads) {
  constexpr int V = 16 / sizeof(T);
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  const int64_t groups = d.channels / V;
  const int64_t pixel = t / groups, first = (t - pixel * groups) * V;
  const int64_t v = pixel % wf, u = pixel / wf % hf, n = pixel / (wf * hf);
  union {
    uint4 vec;
    T e[V];
  } out;
#pragma unroll
  for (int j = 0; j < V; ++j) {
    const int64_t cf = first + j;
    T value = T(0);
    if (cf < d.used) {
      const Source s = source_of(cf, d, p.c);
      const int64_t row = p.stride * u + s.bh - p.pad, col = p.stride * v + s.bw - p.pad;
      if (row >= 0 && row < p.h && col >= 0 && col < p.w) value = x[((n * p.h + row) * p.w + col) * p.c + s.c];
    }
    out.e[j] = value;
  }
  reinterpret_cast<uint4*>(xf)[t] = out.vec;
}

template <class T>
__global__ void fold_filter_kernel(const T* __restrict__ w, T* __restrict__ wf, ConvShape p, Fold d, int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int64_t cf = i % d.channels, aw = i / d.channels % d.aw, ah = i / (d.channels * d.aw) % d.ah;
  const int64_t k = i / (d.channels * d.aw * d.ah);
  T value = T(0);
  if (cf < d.used) {
    const Source s = source_of(cf, d, p.c);
    const int64_t r = d.bh * ah + s.bh, q = d.bw * aw + s.bw;
    if (r < p.r && q < p.s) value = w[((k * p.r + r) * p.s + q) * p.c + s.c];
  }
  wf[i] = value;
}

template <class T>
__global__ void unfold_grad_kernel(const T* __restrict__ dwf, T* __restrict__ dw, ConvShape p, Fold d,
                                   int64_t count) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const int64_t c = i % p.c, q = i / p.c % p.s, r = i / (p.c * p.s) % p.r, k = i / (p.c * p.s * p.r);
  const int64_t ah = r / d.bh, aw = q / d.bw;
  const int64_t cf = ((r - ah * d.bh) * d.bw + (q - aw * d.bw)) * p.c + c;
  dw[i] = dwf[((k * d.ah + ah) * d.aw + aw) * d.channels + cf];
}

unsigned blocks_for(int64_t threads) { return unsigned(ceil_div(threads, kThreads)); }

size_t element_bytes(const ConvShape& p, const std::string& where) {
  const size_t bytes = dtype_size(p.io);
  if (bytes != 2 && bytes != 4)
    fail("{}: folding filter taps takes 2- or 4-byte elements, got {}", where, dtype_name(p.io));
  return bytes;
}

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

const char* tap_fold_name(TapFold f) {
  switch (f) {
    case TapFold::kByStride: return "taps folded by stride";
    case TapFold::kWidthWhole: return "width taps folded";
    default: return "all taps folded";
  }
}

std::vector<TapFold> tap_folds(const ConvShape& p) {
  std::vector<TapFold> folds;
  if (p.c % 8 == 0 || (dtype_size(p.io) != 2 && dtype_size(p.io) != 4)) return folds;
  std::vector<std::pair<int64_t, int64_t>> seen;  // (bh, bw): two folds may coincide on a shape
  for (TapFold f : {TapFold::kByStride, TapFold::kWidthWhole, TapFold::kWhole}) {
    const Fold d = fold_of(p, f);
    const std::pair<int64_t, int64_t> factors{d.bh, d.bw};
    if (d.bh * d.bw == 1 || d.channels > kTapFoldMaxChannels) continue;
    if (std::find(seen.begin(), seen.end(), factors) != seen.end()) continue;
    seen.push_back(factors);
    folds.push_back(f);
  }
  return folds;
}

ConvShape folded_shape(const ConvShape& p, TapFold f) {
  const Fold d = fold_of(p, f);
  ConvShape q = p;
  q.h = p.ho + d.ah - 1, q.w = p.wo + d.aw - 1, q.c = d.channels, q.r = d.ah, q.s = d.aw;
  q.stride = 1, q.pad = 0;
  return q;
}

size_t folded_input_bytes(const ConvShape& p, TapFold f) {
  const ConvShape q = folded_shape(p, f);
  return aligned(size_t(q.n * q.h * q.w * q.c) * dtype_size(p.io));
}

size_t folded_filter_bytes(const ConvShape& p, TapFold f) {
  const ConvShape q = folded_shape(p, f);
  return aligned(size_t(q.k * q.r * q.s * q.c) * dtype_size(p.io));
}

void fold_input(const ConvShape& p, TapFold f, const void* x, void* xf, cudaStream_t stream,
                const std::string& where) {
  const Fold d = fold_of(p, f);
  const ConvShape q = folded_shape(p, f);
  if (element_bytes(p, where) == 2) {
    const int64_t threads = q.n * q.h * q.w * (d.channels / 8);
    fold_input_kernel<uint16_t><<<blocks_for(threads), kThreads, 0, stream>>>(
        static_cast<const uint16_t*>(x), static_cast<uint16_t*>(xf), p, d, q.h, q.w, threads);
  } else {
    const int64_t threads = q.n * q.h * q.w * (d.channels / 4);
    fold_input_kernel<uint32_t><<<blocks_for(threads), kThreads, 0, stream>>>(
        static_cast<const uint32_t*>(x), static_cast<uint32_t*>(xf), p, d, q.h, q.w, threads);
  }
  check_launch(where);
}

void fold_filter(const ConvShape& p, TapFold f, const void* w, void* wf, cudaStream_t stream,
                 const std::string& where) {
  const Fold d = fold_of(p, f);
  const int64_t count = p.k * d.ah * d.aw * d.channels;
  if (element_bytes(p, where) == 2)
    fold_filter_kernel<uint16_t><<<blocks_for(count), kThreads, 0, stream>>>(
        static_cast<const uint16_t*>(w), static_cast<uint16_t*>(wf), p, d, count);
  else
    fold_filter_kernel<uint32_t><<<blocks_for(count), kThreads, 0, stream>>>(
        static_cast<const uint32_t*>(w), static_cast<uint32_t*>(wf), p, d, count);
  check_launch(where);
}

void unfold_filter_grad(const ConvShape& p, TapFold f, const void* dwf, void* dw, cudaStream_t stream,
                        const std::string& where) {
  const Fold d = fold_of(p, f);
  const int64_t count = p.k * p.r * p.s * p.c;
  if (element_bytes(p, where) == 2)
    unfold_grad_kernel<uint16_t><<<blocks_for(count), kThreads, 0, stream>>>(
        static_cast<const uint16_t*>(dwf), static_cast<uint16_t*>(dw), p, d, count);
  else
    unfold_grad_kernel<uint32_t><<<blocks_for(count), kThreads, 0, stream>>>(
        static_cast<const uint32_t*>(dwf), static_cast<uint32_t*>(dw), p, d, count);
  check_launch(where);
}

}  // namespace kiln::cuda

#include "ops/conv/tap_fold_cuda.h"

#include <algorithm>
#include <cstddef>
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

unsigned blocks_for(int64_t threads) { return unsigned(ceil_div(threads, kThreads)); }

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
__host__ __device__ Source source_of(int64_t cf, const Fold& d, int64_t c_count) {
  const int64_t group = cf / c_count;
  return {group / d.bw, group - group / d.bw * d.bw, cf - group * c_count};
}

// Each folded channel's source, worked out once on the host: the folded input's kernel then does
// no per-element index arithmetic (its 64-bit divisions made it 8x slower than its copy).
struct SourceTable {
  int8_t dh[kTapFoldMaxChannels], dw[kTapFoldMaxChannels], c[kTapFoldMaxChannels];
  bool used[kTapFoldMaxChannels];
};

SourceTable source_table(const ConvShape& p, const Fold& d) {
  SourceTable t{};
  for (int64_t cf = 0; cf < d.channels; ++cf) {
    const Source s = source_of(cf, d, p.c);
    t.used[cf] = cf < d.used;
    t.dh[cf] = int8_t(t.used[cf] ? s.bh : 0), t.dw[cf] = int8_t(t.used[cf] ? s.bw : 0);
    t.c[cf] = int8_t(t.used[cf] ? s.c : 0);
  }
  return t;
}

struct InputGeom {
  int64_t h, w, c, stride, pad, hf, wf;
};

// One thread writes the CF channels of one folded pixel as 16-byte vector stores. Index is the
// type of its pixel arithmetic: 32-bit where every index fits (the common case), else 64-bit.
template <class T, int CF, class Index>
__global__ void fold_input_kernel(const T* __restrict__ x, T* __restrict__ xf, InputGeom g, SourceTable t,
                                  Index pixels) {
  constexpr int V = 16 / sizeof(T);
  const Index pixel = Index(blockIdx.x) * Index(blockDim.x) + Index(threadIdx.x);
  if (pixel >= pixels) return;
  const Index wf = Index(g.wf), hf = Index(g.hf), h = Index(g.h), w = Index(g.w), c = Index(g.c);
  const Index v = pixel % wf, rest = pixel / wf;
  const Index u = rest % hf, n = rest / hf;
  const int64_t r0 = int64_t(g.stride) * u - g.pad, c0 = int64_t(g.stride) * v - g.pad;
  const T* xn = x + int64_t(n) * h * w * c;
  union {
    uint4 vec[CF / V];
    T e[CF];
  } out;
#pragma unroll
  for (int cf = 0; cf < CF; ++cf) {
    const int64_t row = r0 + t.dh[cf], col = c0 + t.dw[cf];
    const bool inside = t.used[cf] && row >= 0 && row < h && col >= 0 && col < w;
    out.e[cf] = inside ? xn[(row * w + col) * c + t.c[cf]] : T(0);
  }
  uint4* to = reinterpret_cast<uint4*>(xf) + int64_t(pixel) * (CF / V);
#pragma unroll
  for (int j = 0; j < CF / V; ++j) to[j] = out.vec[j];
}

template <class T, int CF>
void launch_fold_input(const ConvShape& p, const Fold& d, const InputGeom& g, const void* x, void* xf,
                       cudaStream_t stream) {
  const int64_t pixels = p.n * g.hf * g.wf;
  const bool narrow = pixels < (int64_t(1) << 31) && p.n * p.h * p.w * p.c < (int64_t(1) << 31);
  const SourceTable t = source_table(p, d);
  const auto* from = static_cast<const T*>(x);
  auto* to = static_cast<T*>(xf);
  if (narrow)
    fold_input_kernel<T, CF, uint32_t><<<blocks_for(pixels), kThreads, 0, stream>>>(from, to, g, t, uint32_t(pixels));
  else
    fold_input_kernel<T, CF, int64_t><<<blocks_for(pixels), kThreads, 0, stream>>>(from, to, g, t, pixels);
}

template <class T>
void launch_fold_input(const ConvShape& p, const Fold& d, const InputGeom& g, const void* x, void* xf,
                       cudaStream_t stream) {
  switch (d.channels) {
    case 8: return launch_fold_input<T, 8>(p, d, g, x, xf, stream);
    case 16: return launch_fold_input<T, 16>(p, d, g, x, xf, stream);
    case 24: return launch_fold_input<T, 24>(p, d, g, x, xf, stream);
    default: return launch_fold_input<T, 32>(p, d, g, x, xf, stream);
  }
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

size_t element_bytes(const ConvShape& p, const std::string& where) {
  const size_t bytes = dtype_size(p.io);
  if (bytes != 2 && bytes != 4)
    fail("{}: folding filter taps takes 2- or 4-byte elements, got {}", where, dtype_name(p.io));
  return bytes;
}

// Calls f(T{}) with the unsigned type of p's element size: the kernels only move elements.
template <class F>
void with_element_type(const ConvShape& p, const std::string& where, F&& f) {
  if (element_bytes(p, where) == 2)
    f(uint16_t{});
  else
    f(uint32_t{});
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

bool tap_fold_is_lean(const ConvShape& p, TapFold f) {
  return folded_input_bytes(p, f) <= 2 * size_t(p.n * p.h * p.w * p.c) * dtype_size(p.io);
}

std::vector<TapFold> tap_folds_for_mode(const ConvShape& p, int mode) {
  std::vector<TapFold> folds;
  if (mode == 0) return folds;
  for (TapFold f : tap_folds(p))
    if (mode == 2 || tap_fold_is_lean(p, f)) folds.push_back(f);
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

FoldScratch fold_scratch(const ConvShape& p, TapFold f, void* workspace) {
  auto* base = static_cast<std::byte*>(workspace);
  const size_t input = folded_input_bytes(p, f), filter = folded_filter_bytes(p, f);
  return {base, base + input, base + input + filter};
}

size_t fold_scratch_bytes(const ConvShape& p, TapFold f) { return folded_input_bytes(p, f) + folded_filter_bytes(p, f); }

void fold_input(const ConvShape& p, TapFold f, const void* x, void* xf, cudaStream_t stream,
                const std::string& where) {
  const Fold d = fold_of(p, f);
  const ConvShape q = folded_shape(p, f);
  const InputGeom g{p.h, p.w, p.c, p.stride, p.pad, q.h, q.w};
  with_element_type(p, where, [&](auto zero) {
    using T = decltype(zero);
    launch_fold_input<T>(p, d, g, x, xf, stream);
  });
  check_launch(where);
}

void fold_filter(const ConvShape& p, TapFold f, const void* w, void* wf, cudaStream_t stream,
                 const std::string& where) {
  const Fold d = fold_of(p, f);
  const int64_t count = p.k * d.ah * d.aw * d.channels;
  with_element_type(p, where, [&](auto zero) {
    using T = decltype(zero);
    fold_filter_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const T*>(w), static_cast<T*>(wf),
                                                                       p, d, count);
  });
  check_launch(where);
}

void unfold_filter_grad(const ConvShape& p, TapFold f, const void* dwf, void* dw, cudaStream_t stream,
                        const std::string& where) {
  const Fold d = fold_of(p, f);
  const int64_t count = p.k * p.r * p.s * p.c;
  with_element_type(p, where, [&](auto zero) {
    using T = decltype(zero);
    unfold_grad_kernel<T><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<const T*>(dwf), static_cast<T*>(dw),
                                                                       p, d, count);
  });
  check_launch(where);
}

}  // namespace kiln::cuda

// ResNet's block ends on the GPU (resblock_cuda.h): the residual add + ReLU after both branches'
// BN, and its one-pass backward apply, on BatchNorm's tiles (ops/batchnorm/bn_tile_parts_cuda.cuh).
#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "ops/batchnorm/bn_tile_parts_cuda.cuh"
#include "ops/batchnorm/tile_cuda.cuh"
#include "ops/common/flat_cuda.cuh"
#include "ops/resblock/resblock_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

using namespace bn_parts;

// The per-channel constants of the residual add: v = a * scale_a + (b * scale_b + shift), with
// shift = shift_a + shift_b folded into one register, and scale_b = 1, shift_b = 0 for an
// identity shortcut (b * 1 + shift rounds exactly as b + shift). The tiled and flat kernels
// share it, so both paths give the same bits.
struct AddReluChannel {
  float scale_a, scale_b, shift;
  __device__ __forceinline__ static AddReluChannel load(const float* scale_a, const float* shift_a,
                                                        const float* scale_b, const float* shift_b,
                                                        int64_t ch) {
    return {scale_a[ch], scale_b ? scale_b[ch] : 1.f, shift_a[ch] + (shift_b ? shift_b[ch] : 0.f)};
  }
  __device__ __forceinline__ float pre(float a, float b) const {
    return fmaf(a, scale_a, fmaf(b, scale_b, shift));
  }
};

// y = relu(a * scale_a + shift_a + b'), b' = b * scale_b + shift_b or b; the bit mask only with
// VEC == 8 (one whole byte per thread). Two tensors are loaded per row, hence kPairUnroll.
template <class T, int VEC>
__global__ void __launch_bounds__(kTileThreads)
    bn_add_relu_kernel(const T* a, const float* scale_a, const float* shift_a, const T* b,
                       const float* scale_b, const float* shift_b, TileGrid g, T* y,
                       uint8_t* bitmask) {
  constexpr int U = kPairUnroll<T, VEC>;
  const TileThread p = tile_thread<kApplySplit>(g, U);
  if (!p.active) return;
  AddReluChannel k[VEC];
#pragma unroll
  for (int j = 0; j < VEC; ++j) k[j] = AddReluChannel::load(scale_a, shift_a, scale_b, shift_b, p.c0 + j);
  for (int64_t row = p.row; row < p.end; row += p.stride) {
    // Every load before the first store: y may alias a or b.
    Pack<T, VEC> as[U], bs[U];
    load_rows</*STREAMING=*/false>(as, a, bs, b, g, p, row);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t r = row + int64_t{u} * g.rows;
      if (r >= p.end) break;
      const int64_t f = r * g.c + p.c0;
      Pack<T, VEC> out;
      unsigned bits = 0;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float v = k[j].pre(to_float(as[u].v[j]), to_float(bs[u].v[j]));
        const bool on = v > 0.f;  // NaN fails: y = 0, bit 0
        out.v[j] = from_float<T>(on ? v : 0.f);
        bits |= unsigned{on} << j;
      }
      store_pack<T, VEC>(y + f, out);
      if constexpr (VEC == 8) {
        if (bitmask) bitmask[f >> 3] = static_cast<uint8_t>(bits);
      }
    }
  }
}

// Fallback for a bit mask when c is not a multiple of 8 (or pointers are misaligned): one mask
// byte, i.e. 8 consecutive flat elements whatever their channels, per launch_flat step.
template <class T>
struct AddReluFlat {
  const T *a, *b;
  const float *scale_a, *shift_a, *scale_b, *shift_b;
  int64_t c;
  T* y;
  uint8_t* bitmask;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float av[8], bv[8], out[8];
    load8(a, i0, n, vec, av);  // both loads before the store: y may alias a or b
    load8(b, i0, n, vec, bv);
    int64_t ch = i0 % c;
    unsigned bits = 0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float v = AddReluChannel::load(scale_a, shift_a, scale_b, shift_b, ch).pre(av[j], bv[j]);
      const bool on = v > 0.f && i0 + j < n;  // bits past n stay 0
      out[j] = on ? v : 0.f;
      bits |= unsigned{on} << j;
      if (++ch == c) ch = 0;
    }
    store8(y, i0, n, vec, out);
    if (bitmask) bitmask[i0 >> 3] = static_cast<uint8_t>(bits);
  }
};

// A block end's backward apply (resblock's BN_ADD_RELU_BWD): from one read of dy, the mask and
// a (and b), both branches' gradients. da is BN's input gradient of g = dy * mask; db is too when
// NORMALIZED, else g itself (an identity shortcut). TERMS2: dy comes as dy + dy2
// (MaskedRows::add_term).
template <class T, int VEC, bool NORMALIZED, bool TERMS2>
__global__ void __launch_bounds__(kTileThreads, NORMALIZED ? 2 : kBackwardApplyBlocksPerSM)
    bn_add_relu_backward_apply_kernel(const T* dy, const T* dy2, const uint8_t* bitmask, const T* a, const T* b,
                                      BnBranchCoefficients ca, BnBranchCoefficients cb, float inv_m,
                                      TileGrid g, T* da, T* db) {
  constexpr int U = TERMS2 ? kTripleUnroll : kPairUnroll<T, VEC>;
  const TileThread p = tile_thread<kBackwardApplySplit>(g, U);
  if (!p.active) return;
  float mu_a[VEC], k_a[VEC], ka_a[VEC], kb_a[VEC];
  float mu_b[NORMALIZED ? VEC : 1], k_b[NORMALIZED ? VEC : 1], ka_b[NORMALIZED ? VEC : 1], kb_b[NORMALIZED ? VEC : 1];
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    const int64_t ch = p.c0 + j;
    ca.load(ch, inv_m, mu_a[j], k_a[j], ka_a[j], kb_a[j]);
    if constexpr (NORMALIZED) cb.load(ch, inv_m, mu_b[j], k_b[j], ka_b[j], kb_b[j]);
  }
  for (int64_t row = p.row; row < p.end; row += p.stride) {
    MaskedRows<T, VEC, U, /*STREAMING=*/false> in;
    in.load(dy, bitmask, a, g, p, row);
    if constexpr (TERMS2) in.add_term(dy2, g, p, row);
    Pack<T, VEC> bs[NORMALIZED ? U : 1];
    if constexpr (NORMALIZED) load_rows</*STREAMING=*/false>(bs, b, g, p, row);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t r = row + int64_t{u} * g.rows;
      if (r >= p.end) break;
      Pack<T, VEC> out_a, out_b;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float gj = in.masked_dy(u, j);
        out_a.v[j] = from_float<T>(fmaf(k_a[j], gj, -ka_a[j]) - kb_a[j] * (to_float(in.x[u].v[j]) - mu_a[j]));
        if constexpr (NORMALIZED) {
          out_b.v[j] = from_float<T>(fmaf(k_b[j], gj, -ka_b[j]) - kb_b[j] * (to_float(bs[u].v[j]) - mu_b[j]));
        } else {
          out_b.v[j] = from_float<T>(gj);
        }
      }
      store_pack<T, VEC>(da + r * g.c + p.c0, out_a);
      store_pack<T, VEC>(db + r * g.c + p.c0, out_b);
    }
  }
}

}  // namespace

void bn_add_relu_apply(DType dtype, const void* a, const float* scale_a, const float* shift_a,
                       const void* b, const float* scale_b, const float* shift_b, int64_t m,
                       int64_t c, void* y, uint8_t* bitmask, cudaStream_t stream,
                       const std::string& where) {
  const char* fn = "bn_add_relu_apply";
  check_shape(fn, m, c, where);
  if ((scale_b == nullptr) != (shift_b == nullptr))
    fail("{}: {} got only one of scale_b / shift_b; pass both (a shortcut to normalize) or neither "
         "(an identity shortcut)",
         where, fn);
  if (m == 0) return;
  need(fn, where, {{a, "a"}, {scale_a, "scale_a"}, {shift_a, "shift_a"}, {b, "b"}, {y, "y"}});
  dispatch_activation(dtype, fn, [&](auto zero) {
    using T = decltype(zero);
    const T *at = static_cast<const T*>(a), *bt = static_cast<const T*>(b);
    T* yt = static_cast<T*>(y);
    // A bit mask needs 8 channels per thread (one whole mask byte), even in fp32.
    const int vec = choose_vec(c, sizeof(T), {a, b, y}, {}, bitmask ? 8 : 0);
    if (bitmask && vec != 8) {
      const AddReluFlat<T> op{at, bt, scale_a, shift_a, scale_b, shift_b, c, yt, bitmask};
      return launch_flat(op, m * c, flat_vectorizable({a, b, y}), stream, where);
    }
    dispatch_vec(vec, [&](auto v) {
      constexpr int V = decltype(v)::value;
      auto* kernel = bn_add_relu_kernel<T, V>;
      const TileGrid g = grid_for<V>(kernel, m, c, kPairUnroll<T, V>, kApplySplit, where);
      launch_tiles(kernel, g, stream, at, scale_a, shift_a, bt, scale_b, shift_b, g, yt, bitmask);
    });
    check_launch(where);
  });
}

void bn_add_relu_backward_apply(DType dtype, const void* dy, const void* dy2, const uint8_t* bitmask, const void* a,
                                const BnBranch& branch_a, const void* b, const BnBranch* branch_b, int64_t m,
                                int64_t c, void* da, void* db, cudaStream_t stream, const std::string& where) {
  const char* fn = "bn_add_relu_backward_apply";
  check_shape(fn, m, c, where);
  if (m == 0) return;
  need(fn, where, {{dy, "dy"}, {bitmask, "bitmask"}, {a, "a"}, {da, "da"}, {db, "db"}});
  auto need_branch = [&](const BnBranch& br, const char* which) {
    if (!br.gamma || !br.saved_mean || !br.saved_inv_std || !br.sum_dy || !br.sum_dy_xhat)
      fail("{}: {} needs every per-channel pointer of branch {} (gamma, saved statistics, sums)", where, fn, which);
  };
  need_branch(branch_a, "a");
  if (branch_b) {
    need_branch(*branch_b, "b");
    need(fn, where, {{b, "b"}});
  }
  auto coefficients = [](const BnBranch& br) {
    return BnBranchCoefficients{br.gamma, br.saved_mean, br.saved_inv_std, br.sum_dy, br.sum_dy_xhat};
  };
  const BnBranchCoefficients ca = coefficients(branch_a);
  const BnBranchCoefficients cb = branch_b ? coefficients(*branch_b) : ca;
  const float inv_m = static_cast<float>(1.0 / double(m));
  with_tile_types(dtype, fn, c, {dy, dy2, a, b, da, db}, [&](auto zero, auto vec) {
    using T = decltype(zero);
    constexpr int V = decltype(vec)::value;
    auto* kernel = branch_b ? (dy2 ? bn_add_relu_backward_apply_kernel<T, V, true, true>
                                   : bn_add_relu_backward_apply_kernel<T, V, true, false>)
                            : (dy2 ? bn_add_relu_backward_apply_kernel<T, V, false, true>
                                   : bn_add_relu_backward_apply_kernel<T, V, false, false>);
    const int unroll = dy2 ? kTripleUnroll : kPairUnroll<T, V>;
    const TileGrid g = grid_for<V>(kernel, m, c, unroll, kBackwardApplySplit, where);
    launch_tiles(kernel, g, stream, static_cast<const T*>(dy), static_cast<const T*>(dy2), bitmask,
                 static_cast<const T*>(a), static_cast<const T*>(b), ca, cb, inv_m, g, static_cast<T*>(da),
                 static_cast<T*>(db));
    check_launch(where);
  });
}

}  // namespace kiln::cuda

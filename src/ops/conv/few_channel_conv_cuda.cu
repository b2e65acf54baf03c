#include "ops/conv/few_channel_conv_cuda.h"

#include <mma.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include "ops/common/pack_cuda.cuh"
#include "ops/common/workspace_cuda.h"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kFrag = 16;                      // WMMA's m = n = k
constexpr int kTileRows = kWarps * kFrag;      // output pixels per tile: 16 per warp in the forward
constexpr int kSkew = 8;                       // elements added to each shared row: keeps WMMA's 16-byte
                                               // row alignment and spreads the rows over the banks
constexpr int kMaxWgradFrags = 8;              // accumulators a warp holds in the weight gradient
constexpr int64_t kMaxRows = 2147483647 - kTileRows;  // output pixels and input plane sizes: 32-bit indices

struct Geom {
  int64_t n, h, w, c, k, r, s, stride, pad, ho, wo;
  int patch;  // r * s * c: one GEMM row per output pixel
  int lp;     // patch rounded up to a multiple of 16 (WMMA's k)
  __host__ __device__ int64_t rows() const { return n * ho * wo; }
  __host__ __device__ int64_t tiles() const { return (rows() + kTileRows - 1) / kTileRows; }
};

Geom geom_of(const ConvShape& p) {
  Geom g{p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.stride, p.pad, p.ho, p.wo, 0, 0};
  g.patch = int(p.r * p.s * p.c);
  g.lp = (g.patch + kFrag - 1) / kFrag * kFrag;
  return g;
}

constexpr int kRunChunk = 24;  // values of a run a thread loads before storing any: loads in flight together

// Row i of A ([kTileRows][lda]) becomes the patch of output pixel tile * kTileRows + i: the values
// x(n, ho*stride - pad + r, wo*stride - pad + s, c) in (r, s, c) order, the filter's KRSC order;
// zero outside the image, for pixels past the last and in the columns patch .. lp-1. A thread
// copies one (pixel, r) run of s * c values, which lie next to each other in x (NHWC), loading a
// chunk of them into registers before storing: the copy waits for memory once per chunk, not
// once per value. Index arithmetic is 32-bit (few_channel_conv_supported bounds rows and the
// input's rows of pixels), except the offset of an input row.
template <class T>
__device__ void gather_patches(const T* __restrict__ x, const Geom& g, int64_t tile, T* A, int lda) {
  const T zero = from_float<T>(0.f);
  const int r_count = int(g.r), s_count = int(g.s), c_count = int(g.c), run = s_count * c_count;
  const int out_plane = int(g.ho * g.wo), wo_count = int(g.wo), stride = int(g.stride), pad = int(g.pad);
  const int h = int(g.h), w = int(g.w);
  for (int i = threadIdx.x; i < kTileRows * r_count; i += kThreads) {
    const int row = i / r_count, r = i - row * r_count;
    T* dst = A + row * lda + r * run;
    if (r == r_count - 1)
      for (int j = g.patch; j < g.lp; ++j) A[row * lda + j] = zero;
    const int64_t pixel = tile * kTileRows + row;
    int n = 0, hi = -1, wi0 = 0;
    if (pixel < g.rows()) {
      const int p = int(pixel);
      n = p / out_plane;
      const int rest = p - n * out_plane, ho = rest / wo_count, wo = rest - ho * wo_count;
      hi = ho * stride - pad + r;
      wi0 = wo * stride - pad;
    }
    if (hi < 0 || hi >= h) {
      for (int j = 0; j < run; ++j) dst[j] = zero;
      continue;
    }
    const T* src = x + (int64_t{n} * h + hi) * w * c_count;
    if (wi0 >= 0 && wi0 + s_count <= w) {  // inside the image: one contiguous run
      const T* from = src + wi0 * c_count;
      for (int j0 = 0; j0 < run; j0 += kRunChunk) {
        T v[kRunChunk];
#pragma unroll
        for (int j = 0; j < kRunChunk; ++j) v[j] = j0 + j < run ? from[j0 + j] : zero;
#pragma unroll
        for (int j = 0; j < kRunChunk; ++j)
          if (j0 + j < run) dst[j0 + j] = v[j];
      }
    } else {  // at the image's left or right edge
      int j = 0;
      for (int q = 0; q < s_count; ++q) {
        const int wi = wi0 + q;
        const bool inside = wi >= 0 && wi < w;
        for (int c = 0; c < c_count; ++c, ++j) dst[j] = inside ? src[wi * c_count + c] : zero;
      }
    }
  }
}

// Bytes of the forward's shared memory: the filter B [lp][K + skew], then the patches
// A [128][lp + skew], over which the fp32 products C [128][K + 4] are written once taken; at least
// the room of the final per-thread statistics.
template <class T>
size_t fprop_smem_bytes(const Geom& g) {
  const size_t b = size_t(g.lp) * (g.k + kSkew) * sizeof(T);
  const size_t a = size_t(kTileRows) * (g.lp + kSkew) * sizeof(T), c = size_t(kTileRows) * (g.k + 4) * sizeof(float);
  return std::max(b + std::max(a, c), size_t(2) * kThreads * 8 * sizeof(float));
}

// One block per resident slot, taking tiles of 128 output pixels round robin. Each warp
// multiplies its 16 pixels' patches with the whole filter (KF fragments of 16 channels). Each
// thread then stores 8 consecutive channels of a row, rounded to T, and adds the stored values
// to its sums; 256 * 8 is a multiple of K, so a thread keeps the same 8 channels in every tile.
template <class T, int KF>
__global__ void __launch_bounds__(kThreads)
    fprop_stats_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                       float* __restrict__ part_sum, float* __restrict__ part_sq, Geom g) {
  constexpr int K = KF * kFrag, ldb = K + kSkew, ldc = K + 4;
  const int lda = g.lp + kSkew;
  extern __shared__ __align__(128) unsigned char smem[];
  T* B = reinterpret_cast<T*>(smem);
  T* A = B + g.lp * ldb;
  float* C = reinterpret_cast<float*>(A);
  for (int i = threadIdx.x; i < g.lp * K; i += kThreads) {
    const int l = i / K, k = i % K;
    B[l * ldb + k] = l < g.patch ? w[k * g.patch + l] : from_float<T>(0.f);
  }
  const int warp = threadIdx.x / 32, c0 = (threadIdx.x * 8) % K;
  float sum[8] = {}, sq[8] = {};
  for (int64_t tile = blockIdx.x; tile < g.tiles(); tile += gridDim.x) {
    __syncthreads();  // the previous tile's C is read out
    gather_patches(x, g, tile, A, lda);
    __syncthreads();
    wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> acc[KF];
#pragma unroll
    for (int j = 0; j < KF; ++j) wmma::fill_fragment(acc[j], 0.f);
    for (int kk = 0; kk < g.lp; kk += kFrag) {
      wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, T, wmma::row_major> a;
      wmma::load_matrix_sync(a, A + warp * kFrag * lda + kk, lda);
#pragma unroll
      for (int j = 0; j < KF; ++j) {
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, T, wmma::row_major> b;
        wmma::load_matrix_sync(b, B + kk * ldb + j * kFrag, ldb);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();  // every warp is done with A before C overwrites it
#pragma unroll
    for (int j = 0; j < KF; ++j)
      wmma::store_matrix_sync(C + warp * kFrag * ldc + j * kFrag, acc[j], ldc, wmma::mem_row_major);
    __syncthreads();
    const int64_t first = tile * kTileRows;
    const int rows = int(min(int64_t{kTileRows}, g.rows() - first));
    for (int v = threadIdx.x; v < kTileRows * K / 8; v += kThreads) {
      const int row = v * 8 / K;
      if (row >= rows) break;  // rows grow with v
      Pack<T, 8> out;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        out.v[j] = from_float<T>(C[row * ldc + c0 + j]);
        const float stored = to_float(out.v[j]);
        sum[j] += stored;
        sq[j] += stored * stored;
      }
      store_pack<T, 8>(y + (first + row) * K + c0, out);
    }
  }
  // The block's partials: channel ch adds the threads holding it (t = ch / 8 + i * K / 8) in order.
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem);  // [2][kThreads][8]
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    red[threadIdx.x * 8 + j] = sum[j];
    red[(kThreads + threadIdx.x) * 8 + j] = sq[j];
  }
  __syncthreads();
  if (threadIdx.x < K) {
    const int ch = threadIdx.x, j = ch % 8;
    float s = 0.f, q = 0.f;
    for (int t = ch / 8; t < kThreads; t += K / 8) {
      s += red[t * 8 + j];
      q += red[(kThreads + t) * 8 + j];
    }
    part_sum[int64_t{blockIdx.x} * K + ch] = s;
    part_sq[int64_t{blockIdx.x} * K + ch] = q;
  }
}

// Bytes of the weight gradient's shared memory: the dY rows D [128][K + skew] and the patches
// A [128][lp + skew]; the fp32 sums C [K][lp + 4] are written over both at the end.
template <class T>
size_t wgrad_smem_bytes(const Geom& g) {
  const size_t d = size_t(kTileRows) * (g.k + kSkew) * sizeof(T), a = size_t(kTileRows) * (g.lp + kSkew) * sizeof(T);
  return std::max(d + a, size_t(g.k) * (g.lp + 4) * sizeof(float));
}

// dW [K][lp] += dY^T [K][128 pixels] * A [128 pixels][lp], tile after tile. Warp w owns the 16
// output channels kf = w / (8 / KF) and every (8 / KF)-th block of 16 patch columns from
// w % (8 / KF): it loads its dY^T fragment once per 16 pixels for all its column blocks.
template <class T, int KF>
__global__ void __launch_bounds__(kThreads)
    wgrad_kernel(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ part, Geom g) {
  constexpr int K = KF * kFrag, ldd = K + kSkew, kWarpsPerKf = kWarps / KF;
  const int lda = g.lp + kSkew, ldc = g.lp + 4, col_blocks = g.lp / kFrag;
  extern __shared__ __align__(128) unsigned char smem[];
  T* D = reinterpret_cast<T*>(smem);
  T* A = D + kTileRows * ldd;
  float* C = reinterpret_cast<float*>(smem);
  const int warp = threadIdx.x / 32, kf = warp / kWarpsPerKf, lane_group = warp % kWarpsPerKf;
  wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> acc[kMaxWgradFrags];
#pragma unroll
  for (int i = 0; i < kMaxWgradFrags; ++i) wmma::fill_fragment(acc[i], 0.f);
  for (int64_t tile = blockIdx.x; tile < g.tiles(); tile += gridDim.x) {
    __syncthreads();  // the previous tile is used up
    const int64_t first = tile * kTileRows;
    for (int v = threadIdx.x; v < kTileRows * K / 8; v += kThreads) {
      const int row = v * 8 / K, col = v * 8 % K;
      Pack<T, 8> pk;
      if (first + row < g.rows()) {
        pk = load_pack<T, 8>(dy + (first + row) * K + col);
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) pk.v[j] = from_float<T>(0.f);
      }
      store_pack<T, 8>(D + row * ldd + col, pk);
    }
    gather_patches(x, g, tile, A, lda);
    __syncthreads();
    for (int p0 = 0; p0 < kTileRows; p0 += kFrag) {
      // dY^T: element (k, pixel) sits at D[pixel * ldd + k], a column-major matrix.
      wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, T, wmma::col_major> a;
      wmma::load_matrix_sync(a, D + p0 * ldd + kf * kFrag, ldd);
#pragma unroll
      for (int i = 0; i < kMaxWgradFrags; ++i) {
        const int lf = lane_group + i * kWarpsPerKf;
        if (lf < col_blocks) {  // the same for the whole warp
          wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, T, wmma::row_major> b;
          wmma::load_matrix_sync(b, A + p0 * lda + lf * kFrag, lda);
          wmma::mma_sync(acc[i], a, b, acc[i]);
        }
      }
    }
  }
  __syncthreads();  // D and A are used up before C overwrites them
#pragma unroll
  for (int i = 0; i < kMaxWgradFrags; ++i) {
    const int lf = lane_group + i * kWarpsPerKf;
    if (lf < col_blocks)
      wmma::store_matrix_sync(C + kf * kFrag * ldc + lf * kFrag, acc[i], ldc, wmma::mem_row_major);
  }
  __syncthreads();
  const int outputs = K * g.patch;
  for (int o = threadIdx.x; o < outputs; o += kThreads)
    part[int64_t{blockIdx.x} * outputs + o] = C[(o / g.patch) * ldc + o % g.patch];
}

constexpr int kSumLanes = 32;

// out[o] = the sum over blocks of part[b * count + o], in fp64: lane ty adds blocks ty, ty + 32,
// ... in order, then the 32 lanes are added in a fixed tree.
template <class OUT>
__global__ void sum_partials_kernel(const float* __restrict__ part, int blocks, int64_t count, OUT* __restrict__ out) {
  __shared__ double lanes[kSumLanes][kSumLanes + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t o = int64_t{blockIdx.x} * kSumLanes + tx;
  double acc = 0;
  if (o < count)
    for (int b = ty; b < blocks; b += kSumLanes) acc += part[int64_t{b} * count + o];
  lanes[ty][tx] = acc;
  __syncthreads();
  for (int half = kSumLanes / 2; half > 0; half /= 2) {
    if (ty < half) lanes[ty][tx] += lanes[ty + half][tx];
    __syncthreads();
  }
  if (ty == 0 && o < count) out[o] = from_float<OUT>(static_cast<float>(lanes[0][tx]));
}

template <class OUT>
void launch_sum_partials(const float* part, int blocks, int64_t count, OUT* out, cudaStream_t stream,
                         const std::string& where) {
  sum_partials_kernel<OUT><<<unsigned((count + kSumLanes - 1) / kSumLanes), dim3(kSumLanes, kSumLanes), 0, stream>>>(
      part, blocks, count, out);
  check_launch(where);
}

// Calls f(T{}, std::integral_constant<int, K / 16>{}) for the shape's dtype and output channels.
template <class F>
void dispatch(const ConvShape& p, F&& f) {
  auto by_k = [&](auto zero) {
    switch (p.k) {
      case 16: return f(zero, std::integral_constant<int, 1>{});
      case 32: return f(zero, std::integral_constant<int, 2>{});
      default: return f(zero, std::integral_constant<int, 4>{});
    }
  };
  if (p.io == DType::F16) return by_k(__half{});
  return by_k(__nv_bfloat16{});
}

// Blocks the grid gets: as many as the GPU holds at once with `smem` bytes each, at most one
// per tile. Both the workspace size and the launch ask this, so they agree. The first ask per
// kernel, device and smem (at prepare: the workspace size) lets the kernel use all the shared
// memory a block may opt in to and queries the occupancy; later asks, under CUDA Graph capture
// too, only read the cache.
template <class Kernel>
int grid_blocks(Kernel kernel, size_t smem, int64_t tiles, const std::string& where) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, size_t>, int> resident;
  int device = 0;
  KILN_CUDA(cudaGetDevice(&device), where);
  int blocks = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, smem);
    auto it = resident.find(key);
    if (it == resident.end()) {
      int optin = 0, per_sm = 0, sms = 0;
      KILN_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), where);
      if (smem > size_t(optin))
        fail("{}: the few-channel kernel needs {} bytes of shared memory, more than this GPU's {}", where, smem,
             optin);
      KILN_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin), where);
      KILN_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem), where);
      KILN_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), where);
      it = resident.emplace(key, std::max(per_sm, 1) * std::max(sms, 1)).first;
    }
    blocks = it->second;
  }
  return int(std::max<int64_t>(1, std::min<int64_t>(tiles, blocks)));
}

void check_supported(const ConvShape& p, const std::string& where) {
  if (!few_channel_conv_supported(p))
    fail("{}: the few-channel convolution takes fp16 or bf16 with at most {} input channels, 16, 32 or 64 output "
         "channels and at most {} filter values per output channel (R*S*C); got {} with {} input channels, {} "
         "output channels and a {}x{} filter",
         where, kFewChannelsMax, kFewChannelsMaxPatch, dtype_name(p.io), p.c, p.k, p.r, p.s);
}

// The blocks' partials in the workspace, carved the same way when sized and when run: the
// forward's sums and sums of squares ([blocks][k] each), the weight gradient's [blocks][k * patch].
struct FpropPartials {
  float *sum, *sq;
  size_t bytes;
};
FpropPartials fprop_partials(void* workspace, int blocks, const Geom& g) {
  WorkspaceLayout layout(workspace);
  FpropPartials f;
  f.sum = layout.floats(int64_t{blocks} * g.k), f.sq = layout.floats(int64_t{blocks} * g.k);
  f.bytes = layout.used();
  return f;
}
size_t wgrad_partials_bytes(int blocks, const Geom& g) {
  WorkspaceLayout layout;
  layout.floats(int64_t{blocks} * g.k * g.patch);
  return layout.used();
}

}  // namespace

bool few_channel_conv_supported(const ConvShape& p) {
  const bool dtype = p.io == DType::F16 || p.io == DType::BF16;
  const bool k = p.k == 16 || p.k == 32 || p.k == 64;
  return dtype && k && p.c >= 1 && p.c <= kFewChannelsMax && p.r >= 1 && p.s >= 1 &&
         p.r * p.s * p.c <= kFewChannelsMaxPatch && p.n >= 1 && p.ho >= 1 && p.wo >= 1 && p.stride >= 1 &&
         p.n * p.ho * p.wo <= kMaxRows && p.h * p.w * p.c <= kMaxRows && p.h * p.stride < kMaxRows;
}

size_t few_channel_fprop_workspace_bytes(const ConvShape& p) {
  check_supported(p, "few-channel convolution");
  const Geom g = geom_of(p);
  size_t bytes = 0;
  dispatch(p, [&](auto zero, auto kf) {
    using T = decltype(zero);
    const size_t smem = fprop_smem_bytes<T>(g);
    const int blocks = grid_blocks(fprop_stats_kernel<T, kf.value>, smem, g.tiles(), "few-channel convolution");
    bytes = fprop_partials(nullptr, blocks, g).bytes;
  });
  return bytes;
}

size_t few_channel_wgrad_workspace_bytes(const ConvShape& p) {
  check_supported(p, "few-channel weight gradient");
  const Geom g = geom_of(p);
  size_t bytes = 0;
  dispatch(p, [&](auto zero, auto kf) {
    using T = decltype(zero);
    const int blocks = grid_blocks(wgrad_kernel<T, kf.value>, wgrad_smem_bytes<T>(g), g.tiles(),
                                   "few-channel weight gradient");
    bytes = wgrad_partials_bytes(blocks, g);
  });
  return bytes;
}

void few_channel_fprop_stats(const ConvShape& p, const void* x, const void* w, void* y, float* sum, float* sqsum,
                             void* workspace, cudaStream_t stream, const std::string& where) {
  check_supported(p, where);
  if (!x || !w || !y || !sum || !sqsum || !workspace) fail("{}: the few-channel convolution got a null pointer", where);
  if (reinterpret_cast<uintptr_t>(y) % 16 != 0)
    fail("{}: the few-channel convolution writes its output 16 bytes at a time and needs it 16-byte aligned", where);
  const Geom g = geom_of(p);
  dispatch(p, [&](auto zero, auto kf) {
    using T = decltype(zero);
    const size_t smem = fprop_smem_bytes<T>(g);
    const int blocks = grid_blocks(fprop_stats_kernel<T, kf.value>, smem, g.tiles(), where);
    const FpropPartials part = fprop_partials(workspace, blocks, g);
    fprop_stats_kernel<T, kf.value><<<unsigned(blocks), kThreads, smem, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), part.sum, part.sq, g);
    check_launch(where);
    launch_sum_partials(part.sum, blocks, g.k, sum, stream, where);
    launch_sum_partials(part.sq, blocks, g.k, sqsum, stream, where);
  });
}

void few_channel_wgrad(const ConvShape& p, const void* x, const void* dy, void* dw, void* workspace,
                       cudaStream_t stream, const std::string& where) {
  check_supported(p, where);
  if (!x || !dy || !dw || !workspace) fail("{}: the few-channel weight gradient got a null pointer", where);
  if (reinterpret_cast<uintptr_t>(dy) % 16 != 0)
    fail("{}: the few-channel weight gradient reads dY 16 bytes at a time and needs it 16-byte aligned", where);
  const Geom g = geom_of(p);
  dispatch(p, [&](auto zero, auto kf) {
    using T = decltype(zero);
    const size_t smem = wgrad_smem_bytes<T>(g);
    const int blocks = grid_blocks(wgrad_kernel<T, kf.value>, smem, g.tiles(), where);
    float* part = static_cast<float*>(workspace);
    wgrad_kernel<T, kf.value>
        <<<unsigned(blocks), kThreads, smem, stream>>>(static_cast<const T*>(x), static_cast<const T*>(dy), part, g);
    check_launch(where);
    launch_sum_partials(part, blocks, int64_t{g.k} * g.patch, static_cast<T*>(dw), stream, where);
  });
}

}  // namespace kiln::cuda

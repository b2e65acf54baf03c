#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "ops/common/flat_cuda.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/optimizer/optimizer_cuda.h"
#include "ops/optimizer/update_parts_cuda.cuh"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

template <class C>
struct Sgd {
  GradSource<C> grad;
  float* param;
  float* buf;  // nullptr: no momentum
  SgdScalars host;
  const SgdScalars* dev;
  LossScaleInputs scaling;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float inv;
    if (!take_step(scaling, inv)) return;
    const SgdScalars s = dev ? *dev : host;
    float g[8], p[8], b[8];
    grad.load(i0, n, vec, g);
    load8(param, i0, n, vec, p);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] *= inv;
    if (s.weight_decay != 0.f) {
#pragma unroll
      for (int j = 0; j < 8; ++j) g[j] += s.weight_decay * p[j];
    }
    if (buf) {
      load8(buf, i0, n, vec, b);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        b[j] = s.momentum * b[j] + g[j];
        g[j] = s.nesterov ? g[j] + s.momentum * b[j] : b[j];
      }
      store8(buf, i0, n, vec, b);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) p[j] -= s.lr * g[j];
    store8(param, i0, n, vec, p);
    grad.store_copy(i0, vec, p);
  }
};

template <class C>
struct AdamW {
  GradSource<C> grad;
  float* param;
  float* m;
  float* v;
  AdamWScalars host;
  const AdamWScalars* dev;
  LossScaleInputs scaling;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float inv;
    if (!take_step(scaling, inv)) return;
    const AdamWScalars s = dev ? *dev : host;
    float g[8], p[8], mi[8], vi[8];
    grad.load(i0, n, vec, g);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] *= inv;
    load8(param, i0, n, vec, p);
    load8(m, i0, n, vec, mi);
    load8(v, i0, n, vec, vi);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      mi[j] = s.beta1 * mi[j] + s.one_minus_beta1 * g[j];
      vi[j] = s.beta2 * vi[j] + s.one_minus_beta2 * g[j] * g[j];
      const float denom = sqrtf(vi[j]) / s.bias2_sqrt + s.eps;
      p[j] = p[j] * s.keep - s.step_size * (mi[j] / denom);
    }
    store8(m, i0, n, vec, mi);
    store8(v, i0, n, vec, vi);
    store8(param, i0, n, vec, p);
    grad.store_copy(i0, vec, p);
  }
};

// --- LARS ---

constexpr int kLarsThreads = 256;
// A tensor gets a block per kLarsBlockElements elements, up to kLarsMaxBlocks (also the block sums
// the step adds). Measured on an H200 over ResNet-50's 161 tensors (25.6M elements; SGD's update
// takes 132 us): at most 64 blocks, 240 us; 256, 217 us (the largest tensors' blocks no longer
// trail the rest); and one pair of launches for all 161 tensors instead of two pairs, 204 us.
constexpr int64_t kLarsBlockElements = 8192;
constexpr int kLarsMaxBlocks = 256;
// Tensors per pair of launches: their table is a kernel argument, which may take 32 KiB since
// CUDA 12.1 (Volta and later), 4 KiB before.
#if CUDART_VERSION >= 12010
constexpr int kLarsBatch = 320;
constexpr size_t kLarsArgumentBytes = 32000;
#else
constexpr int kLarsBatch = 96;
constexpr size_t kLarsArgumentBytes = 4000;
#endif
constexpr unsigned kAllLanes = 0xffffffffu;

__host__ __device__ __forceinline__ int blocks_for(int64_t length) {
  const int64_t blocks = (length + kLarsBlockElements - 1) / kLarsBlockElements;
  return static_cast<int>(blocks < 1 ? 1 : blocks > kLarsMaxBlocks ? kLarsMaxBlocks : blocks);
}

// One tensor of a batch: its elements, its first block in the batch's launches, and its kind.
struct LarsTensor {
  int64_t offset, length;
  int first_block;
  int flags;  // kLarsPlain, kLarsVec
};
constexpr int kLarsPlain = 1;  // plain momentum SGD: no norms, trust ratio or weight decay
constexpr int kLarsVec = 2;    // its groups of 8 may take packed accesses
struct LarsBatch {
  LarsTensor tensors[kLarsBatch];
  int count;  // tensors in use
  int first;  // index of tensors[0] among all of the update's: where its block sums go
};
static_assert(sizeof(LarsBatch) < kLarsArgumentBytes, "the batch is a kernel argument");

// The tensor block b of a launch works on: the last whose first block is at most b.
__device__ __forceinline__ int tensor_of(const LarsBatch& batch, int b) {
  int lo = 0, hi = batch.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (batch.tensors[mid].first_block <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Butterfly sum: every lane ends with the same bits, whatever the timing.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kAllLanes, v, offset);
  return v;
}

// The block's sum of v, in a fixed order, on thread 0.
__device__ __forceinline__ float block_sum(float v, float (&warps)[kLarsThreads / 32]) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kLarsThreads / 32; ++w) total += warps[w];
  __syncthreads();  // warps[] is reused by the next call
  return total;
}

// Phase 1: block b of a tensor sums the squares of its parameters and (unscaled) gradients over
// the groups of 8 at b, b + blocks, ... into sums[tensor * kLarsMaxBlocks + b].
template <class C>
__global__ void __launch_bounds__(kLarsThreads)
    lars_norms_kernel(const __grid_constant__ LarsBatch batch, GradSource<C> grad, const float* param,
                      LossScaleInputs scaling, float2* sums) {
  float inv;
  if (!take_step(scaling, inv)) return;
  const int k = tensor_of(batch, static_cast<int>(blockIdx.x));
  const LarsTensor t = batch.tensors[k];
  if (t.flags & kLarsPlain) return;
  const int blocks = blocks_for(t.length), b = static_cast<int>(blockIdx.x) - t.first_block;
  const int64_t end = t.offset + t.length, stride = int64_t{blocks} * kLarsThreads * 8;
  const bool vec = (t.flags & kLarsVec) != 0;
  float w2 = 0, g2 = 0;
  for (int64_t i0 = t.offset + (int64_t{b} * kLarsThreads + threadIdx.x) * 8; i0 < end; i0 += stride) {
    float g[8], p[8];
    grad.load_until(i0, end, vec, g);
    load8(param, i0, end, vec, p);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float gj = g[j] * inv;
      w2 += p[j] * p[j];
      g2 += gj * gj;
    }
  }
  __shared__ float warps[kLarsThreads / 32];
  w2 = block_sum(w2, warps);
  g2 = block_sum(g2, warps);
  if (threadIdx.x == 0) sums[int64_t{batch.first + k} * kLarsMaxBlocks + b] = make_float2(w2, g2);
}

// Phase 2: every block of a tensor adds its block sums (one warp, a fixed order: the same trust
// ratio in each), then updates the groups phase 1 read.
template <class C>
__global__ void __launch_bounds__(kLarsThreads)
    lars_step_kernel(const __grid_constant__ LarsBatch batch, GradSource<C> grad, float* param, float* buf,
                     LarsScalars s, const float* device_lr, LossScaleInputs scaling, const float2* sums) {
  float inv;
  if (!take_step(scaling, inv)) return;
  const int k = tensor_of(batch, static_cast<int>(blockIdx.x));
  const LarsTensor t = batch.tensors[k];
  const bool plain = (t.flags & kLarsPlain) != 0, vec = (t.flags & kLarsVec) != 0;
  const int blocks = blocks_for(t.length), b = static_cast<int>(blockIdx.x) - t.first_block;
  __shared__ float trust_of_tensor;
  if (!plain) {
    if (threadIdx.x < 32) {
      const float2* mine = sums + int64_t{batch.first + k} * kLarsMaxBlocks;
      float w2 = 0, g2 = 0;
      for (int i = static_cast<int>(threadIdx.x); i < blocks; i += 32) w2 += mine[i].x, g2 += mine[i].y;
      w2 = warp_sum(w2), g2 = warp_sum(g2);
      if (threadIdx.x == 0) {
        const float w_norm = sqrtf(w2), g_norm = sqrtf(g2);
        trust_of_tensor = w_norm > 0.f && g_norm > 0.f
                              ? s.trust_coefficient * w_norm / (g_norm + s.weight_decay * w_norm)
                              : 1.f;
      }
    }
    __syncthreads();
  }
  const float trust = plain ? 1.f : trust_of_tensor;
  const float lr = device_lr ? *device_lr : s.lr;
  const int64_t end = t.offset + t.length, stride = int64_t{blocks} * kLarsThreads * 8;
  for (int64_t i0 = t.offset + (int64_t{b} * kLarsThreads + threadIdx.x) * 8; i0 < end; i0 += stride) {
    float g[8], p[8], v[8];
    grad.load_until(i0, end, vec, g);
    load8(param, i0, end, vec, p);
    load8(buf, i0, end, vec, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float gj = g[j] * inv;
      const float d = plain ? gj : gj + s.weight_decay * p[j];
      v[j] = s.momentum * v[j] + trust * d;
      p[j] -= lr * v[j];
    }
    store8(buf, i0, end, vec, v);
    store8(param, i0, end, vec, p);
    grad.store_copy_until(i0, end, vec, p);
  }
}

// The host's sgd_scalars / adamw_scalars, on one thread, from device-resident lr and step
// (the same fp64 formulas, so a replayed step updates as an uncaptured one does).
__global__ void derive_sgd_kernel(const float* lr, float momentum, float weight_decay, int nesterov, SgdScalars* out) {
  *out = SgdScalars{*lr, momentum, weight_decay, nesterov};
}

__global__ void derive_adamw_kernel(const float* lr, const int64_t* step, double beta1, double beta2, double eps,
                                    double weight_decay, AdamWScalars* out) {
  const double rate = *lr, t = static_cast<double>(*step + 1);
  AdamWScalars s;
  s.keep = static_cast<float>(1 - rate * weight_decay);
  s.beta1 = static_cast<float>(beta1), s.one_minus_beta1 = static_cast<float>(1 - beta1);
  s.beta2 = static_cast<float>(beta2), s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.step_size = static_cast<float>(rate / (1 - pow(beta1, t)));
  s.bias2_sqrt = static_cast<float>(sqrt(1 - pow(beta2, t)));
  s.eps = static_cast<float>(eps);
  *out = s;
}

}  // namespace

SgdScalars sgd_scalars(double lr, double momentum, double weight_decay, bool nesterov) {
  return SgdScalars{static_cast<float>(lr), static_cast<float>(momentum),
                    static_cast<float>(weight_decay), nesterov ? 1 : 0};
}

AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                           int64_t step) {
  if (step < 1) fail("adamw_scalars: step {} must be >= 1 (it counts this update)", step);
  const double t = static_cast<double>(step);
  AdamWScalars s;
  s.keep = static_cast<float>(1 - lr * weight_decay);
  s.beta1 = static_cast<float>(beta1), s.one_minus_beta1 = static_cast<float>(1 - beta1);
  s.beta2 = static_cast<float>(beta2), s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.step_size = static_cast<float>(lr / (1 - std::pow(beta1, t)));
  s.bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(beta2, t)));
  s.eps = static_cast<float>(eps);
  return s;
}

void derive_sgd_scalars(const float* lr, double momentum, double weight_decay, bool nesterov, SgdScalars* out,
                        cudaStream_t stream, const std::string& where) {
  // Rounded to float as sgd_scalars rounds them.
  derive_sgd_kernel<<<1, 1, 0, stream>>>(lr, static_cast<float>(momentum), static_cast<float>(weight_decay),
                                         nesterov ? 1 : 0, out);
  KILN_CUDA(cudaGetLastError(), where);
}

void derive_adamw_scalars(const float* lr, const int64_t* step, double beta1, double beta2, double eps,
                          double weight_decay, AdamWScalars* out, cudaStream_t stream, const std::string& where) {
  derive_adamw_kernel<<<1, 1, 0, stream>>>(lr, step, beta1, beta2, eps, weight_decay, out);
  KILN_CUDA(cudaGetLastError(), where);
}

void sgd_update(int64_t n, const float* grad, float* param, float* momentum_buf,
                const SgdScalars& s, cudaStream_t stream, const std::string& where,
                const SgdScalars* device_scalars, ComputeCopies compute, LossScaleInputs scaling) {
  check_regions("sgd_update", n, {param}, where);
  check_gradients("sgd_update", n, grad, compute, where);
  if ((s.momentum != 0.f) != (momentum_buf != nullptr))
    fail(
        "{}: sgd_update got momentum {} {} a momentum buffer; the buffer is needed exactly when "
        "momentum != 0",
        where, s.momentum, momentum_buf ? "with" : "without");
  dispatch_compute(grad, compute, "sgd_update (compute copies)", [&](auto source) {
    using C = std::remove_const_t<std::remove_pointer_t<decltype(source.compute)>>;
    Sgd<C> op{source, param, momentum_buf, s, device_scalars, scaling};
    launch_flat(op, n, flat_vectorizable({grad, param, momentum_buf, compute.grad, compute.param}), stream, where);
  });
}

void adamw_update(int64_t n, const float* grad, float* param, float* exp_avg, float* exp_avg_sq,
                  const AdamWScalars& s, cudaStream_t stream, const std::string& where,
                  const AdamWScalars* device_scalars, ComputeCopies compute, LossScaleInputs scaling) {
  check_regions("adamw_update", n, {param, exp_avg, exp_avg_sq}, where);
  check_gradients("adamw_update", n, grad, compute, where);
  dispatch_compute(grad, compute, "adamw_update (compute copies)", [&](auto source) {
    using C = std::remove_const_t<std::remove_pointer_t<decltype(source.compute)>>;
    AdamW<C> op{source, param, exp_avg, exp_avg_sq, s, device_scalars, scaling};
    launch_flat(op, n, flat_vectorizable({grad, param, exp_avg, exp_avg_sq, compute.grad, compute.param}), stream,
                where);
  });
}

LarsScalars lars_scalars(double lr, double momentum, double weight_decay, double trust_coefficient) {
  return LarsScalars{static_cast<float>(lr), static_cast<float>(momentum), static_cast<float>(weight_decay),
                     static_cast<float>(trust_coefficient)};
}

int lars_batch_tensors() { return kLarsBatch; }
int lars_blocks(int64_t length) { return blocks_for(length); }
size_t lars_workspace_bytes(size_t segments) { return segments * kLarsMaxBlocks * sizeof(float2); }

void lars_update(const std::vector<LarsSegment>& segments, int64_t n, const float* grad, float* param,
                 float* momentum_buf, const LarsScalars& s, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream, const std::string& where, const float* device_lr, ComputeCopies compute,
                 LossScaleInputs scaling) {
  check_regions("lars_update", n, {param, momentum_buf}, where);
  check_gradients("lars_update", n, grad, compute, where);
  int64_t end = 0;
  for (const LarsSegment& seg : segments) {
    if (seg.length <= 0 || seg.offset < end || seg.offset + seg.length > n)
      fail("{}: lars_update got a tensor of elements [{}, {}) after one ending at {}, in a region of {}; tensors "
           "must be non-empty, inside the region, in order and apart",
           where, seg.offset, seg.offset + seg.length, end, n);
    if (seg.offset < compute.prefix && seg.offset + seg.length > compute.prefix)
      fail("{}: lars_update got a tensor of elements [{}, {}) across the end of the compute prefix ({}); a tensor "
           "has a compute copy or not, whole",
           where, seg.offset, seg.offset + seg.length, compute.prefix);
    end = seg.offset + seg.length;
  }
  if (segments.empty()) return;
  const size_t needed = lars_workspace_bytes(segments.size());
  if (!workspace || workspace_bytes < needed)
    fail("{}: lars_update needs {} bytes of workspace for {} tensors, got {}; request it when preparing", where,
         needed, segments.size(), workspace ? workspace_bytes : 0);
  float2* sums = static_cast<float2*>(workspace);
  const bool aligned = flat_vectorizable({grad, param, momentum_buf, compute.grad, compute.param});
  dispatch_compute(grad, compute, "lars_update (compute copies)", [&](auto source) {
    using C = std::remove_const_t<std::remove_pointer_t<decltype(source.compute)>>;
    for (size_t first = 0; first < segments.size(); first += kLarsBatch) {
      LarsBatch batch{};
      batch.first = static_cast<int>(first);
      batch.count = static_cast<int>(std::min<size_t>(kLarsBatch, segments.size() - first));
      int blocks = 0;
      bool any_norms = false;
      for (int k = 0; k < batch.count; ++k) {
        const LarsSegment& seg = segments[first + size_t(k)];
        const int flags = (seg.plain ? kLarsPlain : 0) | (aligned && seg.offset % 8 == 0 ? kLarsVec : 0);
        batch.tensors[k] = LarsTensor{seg.offset, seg.length, blocks, flags};
        blocks += blocks_for(seg.length);
        any_norms |= !seg.plain;
      }
      if (any_norms) {
        lars_norms_kernel<C><<<blocks, kLarsThreads, 0, stream>>>(batch, source, param, scaling, sums);
        check_launch(where);
      }
      lars_step_kernel<C><<<blocks, kLarsThreads, 0, stream>>>(batch, source, param, momentum_buf, s, device_lr,
                                                                  scaling, sums);
      check_launch(where);
    }
  });
}

void copy_master_params(int64_t n, const float* master, DType dtype, void* copy,
                        cudaStream_t stream, const std::string& where) {
  cast(DType::F32, master, dtype, copy, n, stream, where);
}

}  // namespace kiln::cuda

#include <climits>
#include <cmath>

#include "ops/common/pack_cuda.cuh"
#include "ops/loss/totals_slots.h"
#include "ops/loss/loss_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

// One warp per row: rows are short (10 to a few thousand classes), so a warp covers one with a
// few loads per lane and reduces it with shuffles, without shared memory or block barriers.
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;
constexpr int kRowThreads = kWarp * kRowsPerBlock;
constexpr unsigned kAllLanes = 0xffffffffu;
// The final sum of the per-row losses: one block.
constexpr int kSumThreads = 256;

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

// Butterfly reductions: every lane ends with the same value, whatever the timing (a + b and
// b + a round alike).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kAllLanes, v, offset));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kAllLanes, v, offset);
  return v;
}

// The row's warp and lane; row >= n for the idle warps of the last block.
struct RowLane {
  int64_t row;
  int lane;
};
__device__ __forceinline__ RowLane row_lane() {
  return {int64_t{blockIdx.x} * kRowsPerBlock + threadIdx.x / kWarp, static_cast<int>(threadIdx.x % kWarp)};
}

// Label smoothing as the kernels use it, computed once on the host in double.
struct Targets {
  float on, off, label_weight, inv_n;  // on = 1 - s + s/C, off = s/C, label_weight = 1 - s
};

// The CPU's formulation (loss_cpu.cpp), in fp32: with shifted = z - max and
// log_sum = log(sum exp(shifted)), loss = log_sum - ((1 - s) * shifted[label] + s/C * sum(shifted))
// and dlogits = (exp(shifted - log_sum) - target) / n. Each lane writes its row's loss, then
// reads the row twice more (hot in L1).
template <class T>
__global__ void __launch_bounds__(kRowThreads)
    softmax_ce_rows(const T* logits, const int32_t* labels, int64_t n, int64_t classes, Targets t, float* row_loss,
                    T* dlogits, const float* loss_scale) {
  const auto [row, lane] = row_lane();
  if (row >= n) return;  // whole warps leave: the shuffles below see all 32 lanes
  const T* z = logits + row * classes;
  float max = -INFINITY;
  for (int64_t c = lane; c < classes; c += kWarp) max = fmaxf(max, to_float(z[c]));
  max = warp_max(max);
  float sum_exp = 0.f, sum_shifted = 0.f;
  for (int64_t c = lane; c < classes; c += kWarp) {
    const float shifted = to_float(z[c]) - max;
    sum_exp += expf(shifted);
    sum_shifted += shifted;
  }
  sum_exp = warp_sum(sum_exp);
  sum_shifted = warp_sum(sum_shifted);
  const float log_sum = logf(sum_exp);
  const int32_t label = labels[row];
  const bool valid = label >= 0 && label < classes;
  if (lane == 0)
    row_loss[row] = valid ? log_sum - (t.label_weight * (to_float(z[label]) - max) + t.off * sum_shifted)
                          : quiet_nan();
  if (!dlogits) return;
  T* d = dlogits + row * classes;
  const float scale = loss_scale ? *loss_scale : 1.f;  // applied in fp32, before the rounding to T
  for (int64_t c = lane; c < classes; c += kWarp) {
    const float p = expf(to_float(z[c]) - max - log_sum);
    const float target = c == label ? t.on : t.off;
    d[c] = from_float<T>(valid ? (p - target) * t.inv_n * scale : quiet_nan());
  }
}

// loss = (sum of the n row losses) / n: each thread adds a fixed stride of rows in order, then
// a fixed tree adds the threads' sums. No atomics, so the loss is the same bits on every run.
__global__ void __launch_bounds__(kSumThreads) mean_of_rows(const float* row_loss, int64_t n, float* loss) {
  __shared__ float partial[kSumThreads];
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kSumThreads) sum += row_loss[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kSumThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) *loss = partial[0] / static_cast<float>(n);
}

// Whether class c, of logit x, ranks before the label's class of logit v (loss_contract.h): a
// larger logit, or an equal one at a smaller class, where NaN orders below every number and equal
// to NaN.
__device__ __forceinline__ bool ranks_before(float x, int c, float v, int label) {
  const bool x_nan = isnan(x);
  if (isnan(v)) return !x_nan || c < label;
  return x > v || (x == v && c < label);
}

// The label's rank is the number of classes that rank before it: each lane counts over its
// classes (one coalesced pass over the row), the warp adds the counts (integers: exact in any
// order), and lane 0 adds the row's hits to the block's, which one integer atomic per slot and
// block adds to the counts, so the result is exact and the same on every run.
template <class T>
__global__ void __launch_bounds__(kRowThreads)
    count_correct_rows(const T* logits, const int32_t* labels, int64_t n, int classes, int32_t* correct) {
  __shared__ int block_hits[kCorrectSlots];
  if (threadIdx.x < kCorrectSlots) block_hits[threadIdx.x] = 0;
  __syncthreads();
  const auto [row, lane] = row_lane();
  const int32_t label = row < n ? labels[row] : -1;
  if (label >= 0 && label < classes) {  // the same for the whole warp: the shuffles see all 32 lanes
    const T* z = logits + row * classes;
    const float v = to_float(z[label]);
    int before = 0;
    for (int c = lane; c < classes; c += kWarp) before += ranks_before(to_float(z[c]), c, v, label);
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) before += __shfl_xor_sync(kAllLanes, before, offset);
    if (lane == 0) {
      if (before < 1) atomicAdd(&block_hits[kTop1Hits], 1);
      if (before < kTopK) atomicAdd(&block_hits[kTop5Hits], 1);
    }
  }
  __syncthreads();
  if (threadIdx.x < kCorrectSlots && block_hits[threadIdx.x] > 0)
    atomicAdd(correct + threadIdx.x, block_hits[threadIdx.x]);
}

void check_rows(const char* fn, const void* logits, const int32_t* labels, int64_t n, int64_t classes,
                const void* out, const std::string& where) {
  if (n < 1 || classes < 1)
    fail("{}: {} got logits of {} rows x {} classes; both must be at least 1", where, fn, n, classes);
  if (classes > INT_MAX)
    fail("{}: {} got {} classes; int32 labels address at most {}", where, fn, classes, INT_MAX);
  if (!logits || !labels || !out) fail("{}: {} got a null logits, labels or output pointer", where, fn);
}

int row_blocks(int64_t n) { return static_cast<int>(ceil_div(n, kRowsPerBlock)); }

}  // namespace

void softmax_cross_entropy(DType dtype, const void* logits, const int32_t* labels, int64_t n, int64_t classes,
                           float label_smoothing, float* loss, void* dlogits, float* row_loss, cudaStream_t stream,
                           const std::string& where, const float* loss_scale) {
  check_rows("softmax_cross_entropy", logits, labels, n, classes, loss, where);
  if (!row_loss) fail("{}: softmax_cross_entropy got no scratch for the row losses", where);
  if (!(label_smoothing >= 0.f && label_smoothing <= 1.f))
    fail("{}: label_smoothing {} is outside [0, 1]; use e.g. 0.1", where, label_smoothing);
  const double s = label_smoothing, off = s / static_cast<double>(classes);
  const Targets t{static_cast<float>(1.0 - s + off), static_cast<float>(off), static_cast<float>(1.0 - s),
                  static_cast<float>(1.0 / static_cast<double>(n))};
  dispatch_activation(dtype, "softmax_cross_entropy", [&](auto zero) {
    using T = decltype(zero);
    softmax_ce_rows<T><<<row_blocks(n), kRowThreads, 0, stream>>>(
        static_cast<const T*>(logits), labels, n, classes, t, row_loss, static_cast<T*>(dlogits), loss_scale);
    check_launch(where);
  });
  mean_of_rows<<<1, kSumThreads, 0, stream>>>(row_loss, n, loss);
  check_launch(where);
}

void count_correct(DType dtype, const void* logits, const int32_t* labels, int64_t n, int64_t classes,
                   int32_t* correct, cudaStream_t stream, const std::string& where) {
  check_rows("count_correct", logits, labels, n, classes, correct, where);
  KILN_CUDA(cudaMemsetAsync(correct, 0, kCorrectSlots * sizeof(int32_t), stream), where);
  dispatch_activation(dtype, "count_correct", [&](auto zero) {
    using T = decltype(zero);
    count_correct_rows<T><<<row_blocks(n), kRowThreads, 0, stream>>>(static_cast<const T*>(logits), labels, n,
                                                                     static_cast<int>(classes), correct);
    check_launch(where);
  });
}

namespace {
__global__ void accumulate_totals_kernel(const float* loss, const int32_t* correct, const int64_t* step,
                                         double* totals) {
  const double value = loss ? double(*loss) : 0.0;
  add_run_to_totals(totals, loss ? &value : nullptr, correct[kTop1Hits], correct[kTop5Hits], *step);
}
}  // namespace

void accumulate_totals(const float* loss, const int32_t* correct, const int64_t* step, double* totals,
                       cudaStream_t stream, const std::string& where) {
  if (!correct || !step || !totals) fail("{}: accumulate_totals needs the hit count, the step and the totals", where);
  accumulate_totals_kernel<<<1, 1, 0, stream>>>(loss, correct, step, totals);
  check_launch(where);
}

}  // namespace kiln::cuda

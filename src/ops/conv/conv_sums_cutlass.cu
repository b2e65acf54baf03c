#include "ops/conv/conv_sums_cutlass.h"

#include <cstdint>
#include <mutex>

#include "kiln/dtype.h"
#include "kiln/error.h"
#include "ops/common/workspace_cuda.h"
#include "ops/conv/conv_sums_cutlass_kernels.h"
#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {

#if KILN_WITH_CUTLASS
namespace {

using namespace cutlass_sums;

constexpr int64_t kMaxPixels = int64_t{1} << 30;

// What the kernels need to know of the current GPU, asked once per device: whether it runs
// sm_90a code (compute capability 9.0 exactly) and its multiprocessor count (the persistent
// GEMM's grid).
struct DeviceFacts {
  bool sm90 = false;
  int sms = 0;
};

DeviceFacts device_facts() {
  static std::mutex mutex;
  static int cached_device = -1;
  static DeviceFacts cached;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (device != cached_device) {
    int major = 0, minor = 0, sms = 0;
    const bool known = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                       cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
                       cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess;
    cudaGetLastError();
    cached = {known && major == 9 && minor == 0, known ? sms : 0};
    cached_device = device;
  }
  return cached;
}

int sm_count() { return device_facts().sms; }

int64_t pixels(const ConvShape& p) { return p.n * p.ho * p.wo; }
int64_t tile_rows(const ConvShape& p) { return (pixels(p) + kTileM - 1) / kTileM; }

struct Partials {
  float *sum_rows, *sq_rows, *sum_parts, *sq_parts;
  size_t bytes;
};

constexpr int kLanes = 32;       // channels a block of the row sums covers
constexpr int kRowGroups = 8;    // threads down the rows in such a block
constexpr int kRowsPerPart = 64; // tile rows one block of the first stage adds

int64_t parts(const ConvShape& p) { return (tile_rows(p) + kRowsPerPart - 1) / kRowsPerPart; }

// The workspace, carved the same way when sized and when run: the epilogue's per-tile rows
// (tile_rows x padded channels, two of them) and the first stage's per-part sums.
Partials partials(void* workspace, const ConvShape& p) {
  WorkspaceLayout layout(workspace);
  Partials out;
  const int64_t rows = tile_rows(p) * padded_channels(p), part_rows = parts(p) * p.k;
  out.sum_rows = layout.floats(rows), out.sq_rows = layout.floats(rows);
  out.sum_parts = layout.floats(part_rows), out.sq_parts = layout.floats(part_rows);
  out.bytes = layout.used();
  return out;
}

// Stage one: part[b][c] = the sum of rows[r][c] for r in part b's kRowsPerPart rows, in fp64, rows
// taken by kRowGroups threads in turn and the groups added in a fixed tree. Stage two adds the
// parts the same way. Fixed by the shape alone: the same bits on every run.
__global__ void sum_rows_kernel(const float* __restrict__ rows, int64_t row_count, int64_t row_stride,
                                int64_t rows_per_part, int64_t channels, float* __restrict__ out) {
  __shared__ double group[kRowGroups][kLanes + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = int64_t{blockIdx.x} * kLanes + tx;
  const int64_t first = int64_t{blockIdx.y} * rows_per_part;
  const int64_t last = first + rows_per_part < row_count ? first + rows_per_part : row_count;
  double acc = 0;
  if (c < channels)
    for (int64_t r = first + ty; r < last; r += kRowGroups) acc += rows[r * row_stride + c];
  group[ty][tx] = acc;
  __syncthreads();
  for (int half = kRowGroups / 2; half > 0; half /= 2) {
    if (ty < half) group[ty][tx] += group[ty + half][tx];
    __syncthreads();
  }
  if (ty == 0 && c < channels) out[int64_t{blockIdx.y} * channels + c] = float(group[0][tx]);
}

void launch_sum_rows(const float* rows, int64_t row_count, int64_t row_stride, int64_t rows_per_part,
                     int64_t channels, float* out, cudaStream_t stream, const std::string& where) {
  const dim3 grid(unsigned((channels + kLanes - 1) / kLanes),
                  unsigned((row_count + rows_per_part - 1) / rows_per_part));
  sum_rows_kernel<<<grid, dim3(kLanes, kRowGroups), 0, stream>>>(rows, row_count, row_stride, rows_per_part,
                                                                 channels, out);
  check_launch(where);
}

void check_supported(const ConvShape& p, const std::string& where) {
  if (!cutlass_fprop_sums_supported(p))
    fail("{}: the CUTLASS convolution with sums takes fp16 or bf16 1x1 convolutions of stride 1 without padding, "
         "with input and output channels multiples of 8, on a compute-capability 9.0 GPU; got {} {}x{} stride {} "
         "padding {} with {} input and {} output channels",
         where, dtype_name(p.io), p.r, p.s, p.stride, p.pad, p.c, p.k);
}

}  // namespace

bool cutlass_kernels_built() { return true; }

bool cutlass_fprop_sums_supported(const ConvShape& p) {
  const bool dtype = p.io == DType::F16 || p.io == DType::BF16;
  if (!dtype || !is_gemm(p) || p.c % 8 != 0 || p.k % 8 != 0 || p.c < 8 || p.k < 8 || p.n < 1 || p.ho < 1 || p.wo < 1 ||
      p.stride < 1 || p.pad < 0 || pixels(p) > kMaxPixels || p.n * p.h * p.w * p.c > kMaxPixels * 8)
    return false;
  if ((p.h + 2 * p.pad - p.r) / p.stride + 1 != p.ho || (p.w + 2 * p.pad - p.s) / p.stride + 1 != p.wo) return false;
  if (!device_facts().sm90) return false;
  return gemm_implementable(p, sm_count());
}

size_t cutlass_fprop_sums_workspace_bytes(const ConvShape& p) {
  check_supported(p, "CUTLASS convolution with sums");
  const size_t own = gemm_workspace_bytes(p, sm_count());
  return partials(nullptr, p).bytes + (own + 255) / 256 * 256;
}

void cutlass_fprop_sums(const ConvShape& p, const void* x, const void* w, void* y, float* sum, float* sqsum,
                        void* workspace, cudaStream_t stream, const std::string& where) {
  check_supported(p, where);
  if (!x || !w || !y || !sum || !sqsum || !workspace)
    fail("{}: the CUTLASS convolution with sums got a null pointer", where);
  for (const void* ptr : {x, w, static_cast<const void*>(y)})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      fail("{}: the CUTLASS convolution reads and writes through TMA and needs 16-byte aligned tensors", where);
  const Partials part = partials(workspace, p);
  void* own = static_cast<std::byte*>(workspace) + part.bytes;
  const Launch launch{x, w, y, part.sum_rows, part.sq_rows, own, stream};
  const char* refused = gemm_launch(p, launch, sm_count());
  if (refused) fail("{}: the CUTLASS convolution with sums did not launch: {}", where, refused);
  check_launch(where);
  const int64_t rows = tile_rows(p), stride = padded_channels(p), part_count = parts(p);
  launch_sum_rows(part.sum_rows, rows, stride, kRowsPerPart, p.k, part.sum_parts, stream, where);
  launch_sum_rows(part.sq_rows, rows, stride, kRowsPerPart, p.k, part.sq_parts, stream, where);
  launch_sum_rows(part.sum_parts, part_count, p.k, part_count, p.k, sum, stream, where);
  launch_sum_rows(part.sq_parts, part_count, p.k, part_count, p.k, sqsum, stream, where);
}

#else  // CUTLASS's headers were not found: never supported.

bool cutlass_kernels_built() { return false; }
bool cutlass_fprop_sums_supported(const ConvShape&) { return false; }
size_t cutlass_fprop_sums_workspace_bytes(const ConvShape&) {
  fail("the CUTLASS convolution with sums was not built (CUTLASS's headers were not found when kiln was configured)");
}
void cutlass_fprop_sums(const ConvShape&, const void*, const void*, void*, float*, float*, void*, cudaStream_t,
                        const std::string& where) {
  fail("{}: the CUTLASS convolution with sums was not built (CUTLASS's headers were not found when kiln was "
       "configured)", where);
}

#endif

}  // namespace kiln::cuda

#include "ops/conv/conv_sums_cutlass.h"

#include <cstdint>
#include <mutex>

#include "kiln/dtype.h"
#include "kiln/error.h"
#include "ops/common/workspace_cuda.h"
#include "runtime/cuda/cuda_check.h"

#if KILN_WITH_CUTLASS
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cutlass/kernel_hardware_info.hpp"
#include "cute/tensor.hpp"
#include "cutlass/conv/collective/collective_builder.hpp"
#include "cutlass/conv/convnd_problem_shape.hpp"
#include "cutlass/conv/device/conv_universal_adapter.hpp"
#include "cutlass/conv/kernel/conv_universal.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/epilogue/thread/activation.h"
#endif

namespace kiln::cuda {

#if KILN_WITH_CUTLASS
namespace {

namespace fusion = cutlass::epilogue::fusion;

constexpr int kTileM = 128;  // output pixels a tile covers: one row of partial sums each
constexpr int64_t kMaxPixels = int64_t{1} << 30;

// The sum of squares' per-element step: the reduction node hands each thread's running partial
// and the value in; the partials of threads, warps and tiles are then added plainly.
template <class T>
struct PlusSquare {
  CUTLASS_HOST_DEVICE T operator()(T const& partial, T const& value) const { return partial + value * value; }
};

// One kernel: element type E (cutlass::bfloat16_t or half_t), output channels a tile covers N.
template <class E, int N>
struct FpropSums {
  using Tile = cute::Shape<cute::Int<kTileM>, cute::Int<N>, cute::Shape<cute::_64>>;
  using Cluster = cute::Shape<cute::_1, cute::_1, cute::_1>;
  // Partial sums only (FinalReduction false): one row per tile of output pixels, added by
  // sum_tile_rows below in a fixed order, where CUTLASS's own final reduction would have the last
  // tile of each column add thousands of rows on one thread each.
  template <template <class> class Step>
  using Sums = fusion::Sm90RowReduction<Step, cutlass::plus, cutlass::plus, 0, Tile, float, float,
                                        cutlass::FloatRoundStyle::round_to_nearest, cute::Stride<cute::_0, cute::_1, cute::_0>, 4,
                                        /*EnableNullptr=*/false, /*FinalReduction=*/false>;
  // The accumulator rounded to the io dtype: what is stored, and what is summed.
  using Rounded = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, E, float,
                                                      cutlass::FloatRoundStyle::round_to_nearest>,
                                  fusion::Sm90AccFetch>;
  using Tree = fusion::Sm90EVT<Sums<PlusSquare>, fusion::Sm90EVT<Sums<cutlass::plus>, Rounded>>;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::TensorNHWC, 8, E,
      cutlass::layout::TensorNHWC, 8, cutlass::epilogue::TmaWarpSpecialized, Tree>::CollectiveOp;
  using Mainloop = typename cutlass::conv::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::conv::Operator::kFprop, E,
      cutlass::layout::TensorNHWC, 8, E, cutlass::layout::TensorNHWC, 8, float, Tile, Cluster,
      cutlass::conv::collective::StageCountAutoCarveout<int(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::conv::collective::KernelScheduleAuto>::CollectiveOp;
  using Problem = cutlass::conv::ConvProblemShape<cutlass::conv::Operator::kFprop, 2>;
  using Kernel = cutlass::conv::kernel::ConvUniversal<Problem, Mainloop, Epilogue>;
  using Conv = cutlass::conv::device::ConvUniversalAdapter<Kernel>;

  static Problem problem(const ConvShape& p) {
    const int pad = int(p.pad), stride = int(p.stride);
    return Problem(cutlass::conv::Mode::kCrossCorrelation, {int(p.n), int(p.h), int(p.w), int(p.c)},
                   {int(p.k), int(p.r), int(p.s), int(p.c)}, {pad, pad}, {pad, pad}, {stride, stride}, {1, 1}, 1);
  }

  static typename Conv::Arguments arguments(const ConvShape& p, const void* x, const void* w, void* y, float* sum_rows,
                                            float* sq_rows) {
    const Problem problem_shape = problem(p);
    typename Kernel::StrideD stride_d{};
    cute::for_each(cute::make_seq<cute::rank<0>(typename Kernel::StrideD{})>{}, [&](auto i) {
      cute::get<0, i>(stride_d) = problem_shape.stride_C[Problem::RankT - 2 - i];
    });
    typename Kernel::EpilogueArguments epilogue{};
    // The tree's arguments, children first: {{{fetch, round}, Σy}, Σy²}.
    epilogue.thread = {{{{}, {}}, {sum_rows, 0.f, {}}}, {sq_rows, 0.f, {}}};
    epilogue.ptr_C = nullptr;
    epilogue.ptr_D = static_cast<E*>(y);
    epilogue.dD = stride_d;
    typename Kernel::MainloopArguments mainloop{static_cast<const E*>(x), static_cast<const E*>(w)};
    cutlass::KernelHardwareInfo hw{};
    return typename Conv::Arguments{problem_shape, mainloop, epilogue, hw};
  }
};

int64_t pixels(const ConvShape& p) { return p.n * p.ho * p.wo; }
int64_t tile_rows(const ConvShape& p) { return (pixels(p) + kTileM - 1) / kTileM; }

// Calls f(FpropSums<E, N>{}) for the shape's dtype and a tile width that fits its channels.
template <class F>
auto dispatch(const ConvShape& p, F&& f) {
  auto by_width = [&](auto e) {
    using E = decltype(e);
    if (p.k <= 64) return f(FpropSums<E, 64>{});
    return f(FpropSums<E, 128>{});
  };
  if (p.io == DType::F16) return by_width(cutlass::half_t{});
  return by_width(cutlass::bfloat16_t{});
}

int padded_channels(const ConvShape& p) {
  const int n = p.k <= 64 ? 64 : 128;
  return int((p.k + n - 1) / n * n);
}

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

bool device_is_sm90() {
  static std::mutex mutex;
  static int cached_device = -1;
  static bool cached = false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (device != cached_device) {
    int major = 0, minor = 0;
    cached = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
             cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess &&
             major == 9 && minor == 0;
    cudaGetLastError();
    cached_device = device;
  }
  return cached;
}

void check_supported(const ConvShape& p, const std::string& where) {
  if (!cutlass_fprop_sums_supported(p))
    fail("{}: the CUTLASS convolution with sums takes fp16 or bf16 with input and output channels multiples of 8 "
         "on a compute-capability 9.0 GPU; got {} with {} input and {} output channels",
         where, dtype_name(p.io), p.c, p.k);
}

}  // namespace

bool cutlass_kernels_built() { return true; }

bool cutlass_fprop_sums_supported(const ConvShape& p) {
  const bool dtype = p.io == DType::F16 || p.io == DType::BF16;
  if (!dtype || p.c % 8 != 0 || p.k % 8 != 0 || p.c < 8 || p.k < 8 || p.n < 1 || p.ho < 1 || p.wo < 1 ||
      p.stride < 1 || p.pad < 0 || pixels(p) > kMaxPixels || p.n * p.h * p.w * p.c > kMaxPixels * 8)
    return false;
  if ((p.h + 2 * p.pad - p.r) / p.stride + 1 != p.ho || (p.w + 2 * p.pad - p.s) / p.stride + 1 != p.wo) return false;
  if (!device_is_sm90()) return false;
  return dispatch(p, [&](auto k) {
    using K = decltype(k);
    // Pointers 16-byte aligned (the arena's are 256): can_implement checks shapes and strides.
    auto* aligned = reinterpret_cast<float*>(uintptr_t{256});
    return K::Conv::can_implement(K::arguments(p, aligned, aligned, aligned, aligned, aligned)) ==
           cutlass::Status::kSuccess;
  });
}

size_t cutlass_fprop_sums_workspace_bytes(const ConvShape& p) {
  check_supported(p, "CUTLASS convolution with sums");
  const size_t own = dispatch(p, [&](auto k) {
    using K = decltype(k);
    auto* aligned = reinterpret_cast<float*>(uintptr_t{256});
    return K::Conv::get_workspace_size(K::arguments(p, aligned, aligned, aligned, aligned, aligned));
  });
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
  dispatch(p, [&](auto k) {
    using K = decltype(k);
    typename K::Conv conv;
    const auto args = K::arguments(p, x, w, y, part.sum_rows, part.sq_rows);
    cutlass::Status status = conv.initialize(args, own, stream);
    if (status == cutlass::Status::kSuccess) status = conv.run(stream);
    if (status != cutlass::Status::kSuccess)
      fail("{}: the CUTLASS convolution with sums did not launch: {}", where, cutlassGetStatusString(status));
    check_launch(where);
  });
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

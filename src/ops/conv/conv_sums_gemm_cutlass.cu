// The persistent GEMM of kiln's CUTLASS convolutions with sums (conv_sums_cutlass_kernels.h).
#include "ops/conv/conv_sums_cutlass_kernels.h"

#if KILN_WITH_CUTLASS
#include "ops/conv/conv_sums_epilogue_cutlass.cuh"
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

namespace kiln::cuda::cutlass_sums {
namespace {

// A 1x1 convolution of stride 1 without padding is a GEMM, y[pixels][k] = x[pixels][c] w[k][c]^T:
// CUTLASS's persistent ping-pong GEMM, whose two consumer warp groups take tiles in turn, so one's
// epilogue (the store and the sums) runs beside the other's MMAs while the producer warp loads
// ahead. Timed on the H200 against the cooperative schedule (both warp groups on one tile) for
// ResNet-50's twelve 1x1 shapes (batch 256): in bf16 faster on all twelve, by up to 15%, in fp16 on
// ten, two level (and CUTLASS 4.2's implicit-GEMM convolution kernel, not persistent, took 1.5-4x
// as long on them).
template <class E>
struct GemmSums {
  using Tile = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::_64>;
  using Cluster = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using Fused = SumsEpilogue<E, Tile>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, 8, E,
      cutlass::layout::RowMajor, 8, cutlass::epilogue::TmaWarpSpecialized,
      typename Fused::Tree>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, cutlass::layout::RowMajor, 8, E,
      cutlass::layout::ColumnMajor, 8, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<int(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Conv = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Conv::Arguments arguments(const ConvShape& p, const void* x, const void* w, void* y, float* sum_rows,
                                            float* sq_rows, int sms) {
    const int m = int(p.n * p.ho * p.wo), n = int(p.k), k = int(p.c);
    const auto stride_a = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, cute::make_shape(m, k, 1));
    const auto stride_b = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, cute::make_shape(n, k, 1));
    const auto stride_d = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, cute::make_shape(m, n, 1));
    typename Conv::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {m, n, k, 1};
    args.mainloop = {static_cast<const E*>(x), stride_a, static_cast<const E*>(w), stride_b};
    args.epilogue.thread = Fused::arguments(sum_rows, sq_rows);
    args.epilogue.ptr_C = nullptr;
    args.epilogue.dC = stride_d;
    args.epilogue.ptr_D = static_cast<E*>(y);
    args.epilogue.dD = stride_d;
    args.hw_info.sm_count = sms;
    return args;
  }
};

}  // namespace

bool gemm_implementable(const ConvShape& p, int sms) { return implementable<GemmSums>(p, sms); }
size_t gemm_workspace_bytes(const ConvShape& p, int sms) { return workspace_bytes<GemmSums>(p, sms); }
const char* gemm_launch(const ConvShape& p, const Launch& l, int sms) { return launch<GemmSums>(p, l, sms); }

}  // namespace kiln::cuda::cutlass_sums
#endif

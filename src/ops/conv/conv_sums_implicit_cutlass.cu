// The implicit-GEMM convolution of kiln's CUTLASS convolutions with sums
// (conv_sums_cutlass_kernels.h): CUTLASS 4.2's Hopper convolution kernel (TMA im2col loads), not
// persistent.
#include "ops/conv/conv_sums_cutlass_kernels.h"

#if KILN_WITH_CUTLASS
// First: cute/tensor.hpp and KernelHardwareInfo before CUTLASS's convolution headers, which use
// them without including them.
#include "ops/conv/conv_sums_epilogue_cutlass.cuh"
#include <cutlass/kernel_hardware_info.hpp>
#include <cutlass/conv/collective/collective_builder.hpp>
#include <cutlass/conv/convnd_problem_shape.hpp>
#include <cutlass/conv/device/conv_universal_adapter.hpp>
#include <cutlass/conv/kernel/conv_universal.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>

namespace kiln::cuda::cutlass_sums {
namespace {

template <class E>
struct ConvSums {
  using Tile = cute::Shape<cute::Int<kTileM>, cute::Int<kTileN>, cute::Shape<cute::_64>>;
  using Cluster = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using Fused = SumsEpilogue<E, Tile>;
  using Tree = typename Fused::Tree;

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
    epilogue.thread = Fused::arguments(sum_rows, sq_rows);
    epilogue.ptr_C = nullptr;
    epilogue.ptr_D = static_cast<E*>(y);
    epilogue.dD = stride_d;
    typename Kernel::MainloopArguments mainloop{static_cast<const E*>(x), static_cast<const E*>(w)};
    cutlass::KernelHardwareInfo hw{};
    return typename Conv::Arguments{problem_shape, mainloop, epilogue, hw};
  }
};

}  // namespace

bool implicit_implementable(const ConvShape& p) { return implementable<ConvSums>(p); }
size_t implicit_workspace_bytes(const ConvShape& p) { return workspace_bytes<ConvSums>(p); }
const char* implicit_launch(const ConvShape& p, const Launch& l) { return launch<ConvSums>(p, l); }

}  // namespace kiln::cuda::cutlass_sums
#endif

#pragma once
// The epilogue of kiln's CUTLASS convolution with sums (conv_sums_cutlass_kernels.h), as a CUTLASS
// epilogue visitor tree, and the dispatch over dtypes its kernel uses.
#include <cstdint>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/epilogue/thread/activation.h>
#include "kiln/dtype.h"
#include "ops/conv/conv_sums_cutlass_kernels.h"

namespace kiln::cuda::cutlass_sums {

namespace fusion = cutlass::epilogue::fusion;

// The sum of squares' per-element step: the reduction node hands each thread's running partial
// and the value in; the partials of threads, warps and tiles are then added plainly.
template <class T>
struct PlusSquare {
  CUTLASS_HOST_DEVICE T operator()(T const& partial, T const& value) const { return partial + value * value; }
};

// The epilogue, for element type E and CTA tile Tile: the accumulator rounded
// to E (what is stored, and what is summed), then its sum and its sum of squares per output channel
// (a column of the GEMM), as partial sums only (FinalReduction false): one row per tile of output
// pixels, added by conv_sums_cutlass.cu in a fixed order, where CUTLASS's own final reduction
// would have the last tile of each column add thousands of rows on one thread each.
template <class E, class Tile>
struct SumsEpilogue {
  template <template <class> class Step>
  using Sums = fusion::Sm90RowReduction<Step, cutlass::plus, cutlass::plus, 0, Tile, float, float,
                                        cutlass::FloatRoundStyle::round_to_nearest,
                                        cute::Stride<cute::_0, cute::_1, cute::_0>, 4,
                                        /*EnableNullptr=*/false, /*FinalReduction=*/false>;
  using Rounded = fusion::Sm90EVT<fusion::Sm90Compute<cutlass::epilogue::thread::Identity, E, float,
                                                      cutlass::FloatRoundStyle::round_to_nearest>,
                                  fusion::Sm90AccFetch>;
  using Tree = fusion::Sm90EVT<Sums<PlusSquare>, fusion::Sm90EVT<Sums<cutlass::plus>, Rounded>>;
  // The tree's arguments, children first: {{{fetch, round}, sum}, sum of squares}.
  static typename Tree::Arguments arguments(float* sum_rows, float* sq_rows) {
    return {{{{}, {}}, {sum_rows, 0.f, {}}}, {sq_rows, 0.f, {}}};
  }
};

// Calls f(K<E>{}) for the shape's element type E.
template <template <class> class K, class F>
auto dispatch(const ConvShape& p, F&& f) {
  if (p.io == DType::F16) return f(K<cutlass::half_t>{});
  return f(K<cutlass::bfloat16_t>{});
}

// The kernel-level entry points for a kernel family K (GemmSums): K<E>::arguments
// builds its arguments, K<E>::Conv is its device adapter.
template <template <class> class K, class... Extra>
bool implementable(const ConvShape& p, Extra... extra) {
  return dispatch<K>(p, [&](auto k) {
    using Kernel = decltype(k);
    // Pointers 16-byte aligned (the arena's are 256): can_implement checks shapes and strides.
    auto* aligned = reinterpret_cast<float*>(uintptr_t{256});
    return Kernel::Conv::can_implement(Kernel::arguments(p, aligned, aligned, aligned, aligned, aligned, extra...)) ==
           cutlass::Status::kSuccess;
  });
}

template <template <class> class K, class... Extra>
size_t workspace_bytes(const ConvShape& p, Extra... extra) {
  return dispatch<K>(p, [&](auto k) {
    using Kernel = decltype(k);
    auto* aligned = reinterpret_cast<float*>(uintptr_t{256});
    return size_t(Kernel::Conv::get_workspace_size(Kernel::arguments(p, aligned, aligned, aligned, aligned, aligned, extra...)));
  });
}

template <template <class> class K, class... Extra>
const char* launch(const ConvShape& p, const Launch& l, Extra... extra) {
  return dispatch<K>(p, [&](auto k) -> const char* {
    using Kernel = decltype(k);
    typename Kernel::Conv conv;
    const auto args = Kernel::arguments(p, l.x, l.w, l.y, l.sum_rows, l.sq_rows, extra...);
    cutlass::Status status = conv.initialize(args, l.workspace, l.stream);
    if (status == cutlass::Status::kSuccess) status = conv.run(l.stream);
    return status == cutlass::Status::kSuccess ? nullptr : cutlassGetStatusString(status);
  });
}

}  // namespace kiln::cuda::cutlass_sums

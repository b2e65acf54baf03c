// Linear kernels as three GEMMs (the LINEAR_FWD / LINEAR_BWD op wrappers: linear_ops_cpu.cpp).
#include "ops/linear/linear_cpu.h"

#include "ops/common/gemm_cpu.h"

namespace kiln {
namespace cpu {

template <class T>
void linear_fwd(const LinearDims& d, const T* x, const T* w, const T* b, T* y) {
  if (b) fill_rows(d.n, d.out, b, y);
  gemm<T>(false, true, d.n, d.out, d.in, T(1), x, d.in, w, d.in, b ? T(1) : T(0), y, d.out);
}

template <class T>
void linear_bwd(const LinearDims& d, const T* dy, const T* x, const T* w, T* dx, T* dw, T* db) {
  if (dx) gemm<T>(false, false, d.n, d.in, d.out, T(1), dy, d.out, w, d.in, T(0), dx, d.in);
  gemm<T>(true, false, d.out, d.in, d.n, T(1), dy, d.out, x, d.in, T(0), dw, d.in);
  if (db) sum_rows(d.n, d.out, dy, db);
}

template void linear_fwd<float>(const LinearDims&, const float*, const float*, const float*, float*);
template void linear_fwd<double>(const LinearDims&, const double*, const double*, const double*,
                                 double*);
template void linear_bwd<float>(const LinearDims&, const float*, const float*, const float*, float*,
                                float*, float*);
template void linear_bwd<double>(const LinearDims&, const double*, const double*, const double*,
                                 double*, double*, double*);

}  // namespace cpu
}  // namespace kiln

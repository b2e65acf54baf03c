// What the CUDA ops that run convolutions share (conv_cuda.h).
#include "ops/conv/conv_cuda.h"

#include <string>

namespace kiln::cuda {

ConvProblem conv_problem(const OpCall& call, const TensorArg& x, const TensorArg& w, const TensorArg& y, int stride,
                         int padding) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  if (xs.size() != 4 || ws.size() != 4 || xs[3] != ws[3])
    fail("{}: input {} and filter {} do not form an NHWC/KRSC convolution", call.where(), shape_str(xs),
         shape_str(ws));
  if (x.dtype() != w.dtype())
    fail("{}: input is {} but the filter is {}; mixed precision convolutions read the filter's {} copy",
         call.where(), dtype_name(x.dtype()), dtype_name(w.dtype()), dtype_name(x.dtype()));
  const ConvProblem p = make_conv_problem(xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], stride, padding, x.dtype());
  if (y) {
    const Shape want{p.n, p.ho, p.wo, p.k};
    if (y.shape() != want)
      fail("{}: '{}' has shape {} but the convolution {} needs {}", call.where(), y.spec->name, shape_str(y.shape()),
           conv_problem_str(p), shape_str(want));
  }
  return p;
}

}  // namespace kiln::cuda

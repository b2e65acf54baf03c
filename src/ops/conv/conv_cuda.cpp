// What the CUDA ops that run convolutions share (conv_cuda.h).
#include "ops/conv/conv_cuda.h"

#include <string>

namespace kiln::cuda {

ConvProblem conv_problem(const OpCall& call, const TensorArg& x, const TensorArg& w, const TensorArg& y,
                         const ConvWindow& window) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const int groups = window.groups;
  if (xs.size() != 4 || ws.size() != 4 || groups < 1 || xs[3] != ws[3] * groups)
    fail("{}: input {} and filter {} do not form an NHWC/KRSC convolution of {} group{} (the filter's last "
         "dimension must be the input's channels / groups)",
         call.where(), shape_str(xs), shape_str(ws), groups, groups == 1 ? "" : "s");
  if (ws[0] % groups != 0)
    fail("{}: filter {} has {} output channels, which {} groups do not divide", call.where(), shape_str(ws), ws[0],
         groups);
  if (x.dtype() != w.dtype())
    fail("{}: input is {} but the filter is {}; mixed precision convolutions read the filter's {} copy",
         call.where(), dtype_name(x.dtype()), dtype_name(w.dtype()), dtype_name(x.dtype()));
  const ConvProblem p = make_conv_problem(xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2], window, x.dtype());
  if (y) {
    const Shape want{p.n, p.ho, p.wo, p.k};
    if (y.shape() != want)
      fail("{}: '{}' has shape {} but the convolution {} needs {}", call.where(), y.spec->name, shape_str(y.shape()),
           conv_problem_str(p), shape_str(want));
  }
  return p;
}

ConvShape conv_shape(const ConvProblem& p) {
  if (!p.win.is_square())
    fail("kiln's own CUDA convolution kernels run only square windows (one stride, one padding on every side, no "
         "dilation, one group), not {}; run this convolution through cuDNN (the plain conv op)",
         conv_problem_str(p));
  return {p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.win.stride_h, p.win.pad_top, p.ho, p.wo, p.io};
}

}  // namespace kiln::cuda

#pragma once
// Group normalization, PyTorch's nn.GroupNorm(groups, C, eps) with its learned per-channel weight
// and bias, on channels-last maps (N,H,W,C) or flat features (N,C): each sample's channels are cut
// into `groups` runs of C / groups consecutive channels, and each run is normalized over its
// channels and every position with its mean and biased variance (group_norm_geometry.h).
#include "runtime/op_contract.h"

namespace kiln {

// y = (x - mean) * rstd * weight[c] + bias[c], mean and rstd = 1 / sqrt(var + eps) those of x's
// (sample, group). Training saves mean and rstd, N x groups each, for the backward; inference
// (which has no backward) omits them. weight, bias and the statistics are in the program's
// parameter dtype (fp32 beside fp16/bf16 activations: the masters, read directly).
// `workspace` holds the GPU's partial sums (group_norm_gpu::Workspace: fp32, sized by the extents);
// CPU programs have none (the CPU sums in double on its own).
template <class T>
struct GroupNormForward {
  static constexpr OpKind kind = OpKind::GROUP_NORM_FWD;
  T x, weight, bias, y, mean, rstd, workspace;
  int groups = 1;
  double eps = 1e-5;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("weight", weight), v.in("bias", bias);
    v.out("y", y), v.out("mean", mean, kOptional), v.out("rstd", rstd, kOptional);
    v.out("workspace", workspace, kOptional);
    v.attr("groups", groups), v.attr("eps", eps);
  }
};

// With xhat = (x - mean) * rstd and g = dy * weight[c], over each (sample, group)'s M elements:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (absent when the input wants no gradient)
//   dweight[c] = sum over samples and positions of dy * xhat,  dbias[c] = sum of dy.
template <class T>
struct GroupNormBackward {
  static constexpr OpKind kind = OpKind::GROUP_NORM_BWD;
  T dy, x, weight, mean, rstd, dx, dweight, dbias, workspace;
  int groups = 1;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("x", x), v.in("weight", weight), v.in("mean", mean), v.in("rstd", rstd);
    v.out("dx", dx, kOptional), v.out("dweight", dweight), v.out("dbias", dbias);
    v.out("workspace", workspace, kOptional);
    v.attr("groups", groups);
  }
};

}  // namespace kiln

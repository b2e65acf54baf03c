#pragma once
// PyTorch's nn.LayerNorm(C, eps) over the last axis of kiln's tensors: each row of C values (a
// position's channels of an NHWC map, or a flat row's features) normalized by its own mean and
// biased variance, then scaled and shifted per channel:
//   y = (x - mean) * rstd * weight + bias,   rstd = 1 / sqrt(var + eps).
// The weight and bias are the parameters themselves (fp32 masters in mixed precision), as are the
// statistics the forward saves: fp32 in fp32/fp16/bf16 programs, double in fp64.
#include "runtime/op_contract.h"

namespace kiln {

// Training saves each row's mean and rstd for the backward; inference runs the same op without.
template <class T>
struct LayerNormForward {
  static constexpr OpKind kind = OpKind::LAYER_NORM_FWD;
  T x, weight, bias, y;
  T mean, rstd;  // optional, both or neither: one value per row
  double eps = 1e-5;
  template <class V>
  void fields(V& v) {
    v.in("x", x), v.in("weight", weight), v.in("bias", bias);
    v.out("y", y), v.out("mean", mean, kOptional), v.out("rstd", rstd, kOptional);
    v.attr("eps", eps);
  }
};

// With g = dy * weight and xhat = (x - mean) * rstd, each row's
//   dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)),
// and over all rows dweight = sum(dy * xhat), dbias = sum(dy), each written only where wanted (an
// input the data batch feeds wants no dx). `partials` is the GPU's workspace for the two sums (one
// row of 2C partial sums per tile of rows, layer_norm_tiles.h), declared by the lowering of CUDA
// programs; the CPU sums without it.
template <class T>
struct LayerNormBackward {
  static constexpr OpKind kind = OpKind::LAYER_NORM_BWD;
  T dy, x, weight, mean, rstd;
  T dx, dweight, dbias, partials;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("x", x), v.in("weight", weight), v.in("mean", mean), v.in("rstd", rstd);
    v.out("dx", dx, kOptional), v.out("dweight", dweight, kOptional), v.out("dbias", dbias, kOptional);
    v.out("partials", partials, kOptional);
  }
};

}  // namespace kiln

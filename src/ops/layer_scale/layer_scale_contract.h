#pragma once
// A learned per-channel multiply, torchvision ConvNeXt's `layer_scale * x`: x is a channels-last
// map (N, H, W, C) or rows (N, C), seen by the ops as rows of C channels, and gamma holds one
// factor a channel (the parameter `<layer>.layer_scale`, (C, 1, 1) as PyTorch's for a map, (C) for
// rows). gamma is the fp32 master in every precision but fp64 (as BatchNorm's), so the ops read it
// as it is and write its gradient in fp32.
#include "runtime/op_contract.h"

namespace kiln {

// y[r, c] = gamma[c] * x[r, c].
template <class T>
struct LayerScaleForward {
  static constexpr OpKind kind = OpKind::LAYER_SCALE_FWD;
  T x, gamma, y;
  template <class V>
  void fields(V& v) { v.in("x", x), v.in("gamma", gamma), v.out("y", y); }
};

// dx = dy * gamma (absent when x is the data batch) and dgamma[c] = sum over rows r of
// dy[r, c] * x[r, c], added in an order fixed by the extents alone. The GPU adds in two stages
// through `partials` (fp32, (layer_scale_partial_chunks(rows), C): layer_scale_partials.h), which
// the lowering declares for CUDA programs only; the CPU needs none.
template <class T>
struct LayerScaleBackward {
  static constexpr OpKind kind = OpKind::LAYER_SCALE_BWD;
  T dy, x, gamma, dx, dgamma, partials;
  template <class V>
  void fields(V& v) {
    v.in("dy", dy), v.in("x", x), v.in("gamma", gamma);
    v.out("dx", dx, kOptional), v.out("dgamma", dgamma), v.out("partials", partials, kOptional);
  }
};

}  // namespace kiln

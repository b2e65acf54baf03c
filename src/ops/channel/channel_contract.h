#pragma once
// Moving channels without arithmetic (ShuffleNetV2): torchvision's channel_shuffle and x.narrow(1,
// start, count) on kiln's channels-last tensors, whose channels are each row's last axis (a row: one
// pixel of an NHWC map, or one sample's features of a flat N x F tensor). Every op is a copy: the
// results are the inputs' bits.
#include <vector>

#include "runtime/op_contract.h"

namespace kiln {

// y[..., j * groups + i] = x[..., i * (C / groups) + j] for i < groups, j < C / groups: the channels
// seen as groups x (C / groups), transposed (channel_shuffle's view, transpose(1, 2), view). x and y
// are NHWC maps of one shape; groups divides C.
template <class T>
struct ChannelShuffleForward {
  static constexpr OpKind kind = OpKind::CHANNEL_SHUFFLE_FWD;
  T x, y;
  int groups = 1;
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y), v.attr("groups", groups); }
};

// dx = the inverse permutation of dy: dx[..., i * (C / groups) + j] = dy[..., j * groups + i], which
// is the shuffle of dy in C / groups groups.
template <class T>
struct ChannelShuffleBackward {
  static constexpr OpKind kind = OpKind::CHANNEL_SHUFFLE_BWD;
  T dy, dx;
  int groups = 1;  // the forward's
  template <class V>
  void fields(V& v) { v.in("dy", dy), v.out("dx", dx), v.attr("groups", groups); }
};

// y[..., k] = x[..., start + k] for k below y's channels. x and y have the same rows (batch, height
// and width, or batch alone for flat features).
template <class T>
struct ChannelSliceForward {
  static constexpr OpKind kind = OpKind::CHANNEL_SLICE_FWD;
  T x, y;
  int start = 0;
  template <class V>
  void fields(V& v) { v.in("x", x), v.out("y", y), v.attr("start", start); }
};

// The input's gradient from the gradients of slices that lie side by side from channel `start`
// on: dx[..., start + o_s + k] = dys[s][..., k], o_s the channels of the dys before s, and 0 in
// every channel no slice took. One slice's gradient (a single dy), or those of sibling slices that
// together read one run of the input's channels (x.chunk(2, dim=1)'s halves), written once.
template <class T>
struct ChannelSliceBackward {
  static constexpr OpKind kind = OpKind::CHANNEL_SLICE_BWD;
  T dx;
  std::vector<T> dys;
  int start = 0;
  template <class V>
  void fields(V& v) { v.out("dx", dx), v.in_list("dys", dys), v.attr("start", start); }
};

}  // namespace kiln

#pragma once
// Where a 2-D convolution's filter lands on its input, apart from the tensors' sizes: strides,
// the padding of each side, dilation and groups (PyTorch's nn.Conv2d arguments, ONNX's Conv
// attributes). Shared by the convolution's op contract, its CPU geometry and its cuDNN problem, so
// every backend reads one description. A "square" window (one stride, one padding on every side,
// no dilation, one group) is what kiln's hand-written CUDA convolutions and the fused CBR and
// conv_bn ops run; the plain convolution op runs any window.
#include <cstdint>

namespace kiln {

struct ConvWindow {
  int stride_h = 1, stride_w = 1;
  int pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;  // divides the input and output channels; filters have C / groups channels

  static ConvWindow square(int stride, int pad) { return {stride, stride, pad, pad, pad, pad, 1, 1, 1}; }
  bool is_square() const {
    return stride_h == stride_w && pad_top == pad_left && pad_top == pad_bottom && pad_top == pad_right &&
           dilation_h == 1 && dilation_w == 1 && groups == 1;
  }
  // The extent of a dilated filter of `taps` taps along one axis.
  static int64_t extent(int64_t taps, int dilation) { return (taps - 1) * dilation + 1; }
  // Output rows and columns of an h x w input under an r x s filter (floor mode, as PyTorch); <= 0
  // when the dilated filter does not fit the padded input.
  int64_t out_h(int64_t h, int64_t r) const {
    return (h + pad_top + pad_bottom - extent(r, dilation_h)) / stride_h + 1;
  }
  int64_t out_w(int64_t w, int64_t s) const {
    return (w + pad_left + pad_right - extent(s, dilation_w)) / stride_w + 1;
  }
  bool operator==(const ConvWindow& o) const {
    return stride_h == o.stride_h && stride_w == o.stride_w && pad_top == o.pad_top && pad_left == o.pad_left &&
           pad_bottom == o.pad_bottom && pad_right == o.pad_right && dilation_h == o.dilation_h &&
           dilation_w == o.dilation_w && groups == o.groups;
  }
  bool operator!=(const ConvWindow& o) const { return !(*this == o); }

  // An op contract's attributes (runtime/op_contract.h): the fields in this order.
  template <class V>
  void attrs(V& v) {
    v.attr("stride_h", stride_h), v.attr("stride_w", stride_w);
    v.attr("pad_top", pad_top), v.attr("pad_left", pad_left), v.attr("pad_bottom", pad_bottom),
        v.attr("pad_right", pad_right);
    v.attr("dilation_h", dilation_h), v.attr("dilation_w", dilation_w), v.attr("groups", groups);
  }
};

}  // namespace kiln

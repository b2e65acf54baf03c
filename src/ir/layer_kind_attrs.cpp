#include "kiln/layer_kind_attrs.h"

#include <cmath>

#include "kiln/error.h"

namespace kiln {

namespace {

// The checks both sliding windows share: positive kernel and stride, padding >= 0.
void check_window(const std::string& where, int kernel_h, int kernel_w, int stride_h, int stride_w,
                  const int (&pads)[4]) {
  if (kernel_h <= 0 || kernel_w <= 0)
    fail("{}: kernel size must be positive, got {}x{}", where, kernel_h, kernel_w);
  if (stride_h <= 0 || stride_w <= 0) fail("{}: stride must be positive, got {}x{}", where, stride_h, stride_w);
  for (int p : pads)
    if (p < 0)
      fail("{}: padding must be >= 0, got {} (top, left, bottom, right: {}, {}, {}, {})", where, p, pads[0], pads[1],
           pads[2], pads[3]);
}

}  // namespace

void WeightInit::check(const std::string& where) const {
  if (!(gain > 0) || !std::isfinite(gain))
    fail("{}: the initializer's gain (its standard deviation or bound{}) must be finite and positive, got {}", where,
         fan == Fan::None ? "" : " times sqrt(fan)", gain);
  if (int(draw) > int(Draw::Uniform) || int(fan) > int(Fan::Out))
    fail("{}: the initializer's draw or fan is not one of WeightInit's enumerators; use its factories "
         "(kaiming_normal_fan_out(), normal(std), ...)",
         where);
}

ConvAttrs ConvAttrs::square(int out_channels, int kernel, int stride, int padding, bool bias) {
  ConvAttrs a;
  a.out_channels = out_channels;
  a.kernel_h = a.kernel_w = kernel;
  a.stride_h = a.stride_w = stride;
  a.pad_top = a.pad_left = a.pad_bottom = a.pad_right = padding;
  a.bias = bias;
  return a;
}

void ConvAttrs::check(const std::string& where) const {
  if (out_channels <= 0) fail("{}: output channels must be positive, got {}", where, out_channels);
  check_window(where, kernel_h, kernel_w, stride_h, stride_w, {pad_top, pad_left, pad_bottom, pad_right});
  if (dilation_h < 1 || dilation_w < 1)
    fail("{}: dilation must be >= 1 (1: a dense kernel), got {}x{}", where, dilation_h, dilation_w);
  if (groups < 1) fail("{}: groups must be >= 1 (1: an ordinary convolution), got {}", where, groups);
  init.check(where);
  if (out_channels % groups != 0)
    fail("{}: groups {} does not divide its {} output channels; use a number of groups that divides both the input "
         "and the output channels",
         where, groups, out_channels);
}

void BatchNormAttrs::check(const std::string& where) const {
  if (!(eps > 0) || !std::isfinite(eps)) fail("{}: eps must be positive, got {}", where, eps);
  if (!(momentum >= 0 && momentum <= 1)) fail("{}: momentum must be in [0, 1], got {}", where, momentum);
}

void ConvBnAttrs::check(const std::string& where) const {
  conv.check(where);
  bn.check(where);
  if (conv.bias)
    fail("{}: a convolution followed by BatchNorm has no bias (BatchNorm's mean subtraction cancels it); set bias "
         "false, or write conv() and bn() for a separate biased convolution",
         where);
}

PoolAttrs PoolAttrs::square(int kernel, int stride, int padding) {
  PoolAttrs a;
  a.kernel_h = a.kernel_w = kernel;
  a.stride_h = a.stride_w = stride;
  a.pad_top = a.pad_left = a.pad_bottom = a.pad_right = padding;
  return a;
}

void PoolAttrs::check(const std::string& where) const {
  check_window(where, kernel_h, kernel_w, stride_h, stride_w, {pad_top, pad_left, pad_bottom, pad_right});
  const auto at_most_half = [&](int pad, int kernel, const char* side) {
    if (2 * pad > kernel)
      fail("{}: padding {} ({}) exceeds half the kernel {}; use padding <= {}", where, pad, side, kernel, kernel / 2);
  };
  at_most_half(pad_top, kernel_h, "top");
  at_most_half(pad_bottom, kernel_h, "bottom");
  at_most_half(pad_left, kernel_w, "left");
  at_most_half(pad_right, kernel_w, "right");
}

void LinearAttrs::check(const std::string& where) const {
  if (out_features <= 0) fail("{}: output features must be positive, got {}", where, out_features);
  init.check(where);
}

void AdaptiveAvgPoolAttrs::check(const std::string& where) const {
  if (out_h <= 0 || out_w <= 0) fail("{}: the output size must be positive, got {}x{}", where, out_h, out_w);
}

void StochasticDepthAttrs::check(const std::string& where) const {
  if (!(p >= 0 && p < 1))
    fail("{}: the drop probability must be in [0, 1), got {} (0 keeps every sample)", where, p);
}

void LayerNormAttrs::check(const std::string& where) const {
  if (!(eps > 0) || !std::isfinite(eps)) fail("{}: eps must be finite and positive, got {} (PyTorch's default: 1e-5)", where, eps);
}

void GroupNormAttrs::check(const std::string& where) const {
  if (groups < 1) fail("{}: groups must be >= 1 (1 normalizes all channels together), got {}", where, groups);
  if (!(eps > 0) || !std::isfinite(eps)) fail("{}: eps must be finite and positive, got {} (PyTorch's default: 1e-5)", where, eps);
}

void LayerScaleAttrs::check(const std::string& where) const {
  if (!std::isfinite(init_value)) fail("{}: the initial scale must be finite, got {}", where, init_value);
}

void ChannelShuffleAttrs::check(const std::string& where) const {
  if (groups < 1) fail("{}: groups must be >= 1 (ShuffleNetV2 uses 2), got {}", where, groups);
}

void ChannelSliceAttrs::check(const std::string& where) const {
  if (start < 0) fail("{}: the first channel must be >= 0, got {}", where, start);
  if (count < 1) fail("{}: the slice must hold at least one channel, got {}", where, count);
}

void DropoutAttrs::check(const std::string& where) const {
  if (!(p >= 0 && p < 1)) fail("{}: probability must be in [0, 1), got {}", where, p);
}

void ActivationAttrs::check(const std::string& where) const {
  if (int(activation) >= kActivationCount)
    fail("{}: {} is not a kiln::Activation (there are {}); use one of its enumerators", where, int(activation),
         kActivationCount);
  if (!std::isfinite(alpha)) fail("{}: alpha must be finite, got {}", where, alpha);
}

}  // namespace kiln

// ConvGeom::make (conv_cpu.h): the convolution's geometry from its tensors' shapes and window, each
// refusal naming what is wrong and how to fix it.
#include <utility>

#include "kiln/error.h"
#include "ops/conv/conv_cpu.h"

namespace kiln::cpu {
namespace {

void check_window(const ConvWindow& win) {
  if (win.stride_h < 1 || win.stride_w < 1)
    fail("conv: stride is {}x{} (rows x columns); each must be at least 1", win.stride_h, win.stride_w);
  if (win.dilation_h < 1 || win.dilation_w < 1)
    fail("conv: dilation is {}x{} (rows x columns); each must be at least 1 (1: no dilation)", win.dilation_h,
         win.dilation_w);
  const std::pair<const char*, int> sides[] = {
      {"top", win.pad_top}, {"left", win.pad_left}, {"bottom", win.pad_bottom}, {"right", win.pad_right}};
  for (auto [side, pad] : sides)
    if (pad < 0) fail("conv: {} padding is {}; padding must not be negative (crop the input instead)", side, pad);
  if (win.groups < 1) fail("conv: groups is {}; it must be at least 1 (1: an ordinary convolution)", win.groups);
}

void check_channels(const Shape& x, const Shape& w, int groups) {
  const int64_t c = x[3], k = w[0];
  if (c % groups != 0)
    fail("conv: groups = {} does not divide the input's {} channels (input {}); choose groups that divides both "
         "the input and the output channels",
         groups, c, shape_str(x));
  if (k % groups != 0)
    fail("conv: groups = {} does not divide the filter's {} output channels (filter {}); choose groups that "
         "divides both the input and the output channels",
         groups, k, shape_str(w));
  if (w[3] != c / groups) {
    if (groups == 1)
      fail("conv: input {} has {} channels but filter {} expects {}; make the filter's last dimension equal the "
           "input channels",
           shape_str(x), c, shape_str(w), w[3]);
    fail("conv: filter {} has {} channels but input {} in {} groups needs C / groups = {} channels; make the "
         "filter's last dimension {} (filters are K x R x S x C/groups)",
         shape_str(w), w[3], shape_str(x), groups, c / groups, c / groups);
  }
}

// The dilated filter must fit the padded input along one axis.
void check_fits(const char* axis, int64_t size, int pad_lo, int pad_hi, int64_t taps, int dilation) {
  const int64_t extent = ConvWindow::extent(taps, dilation), padded = size + pad_lo + pad_hi;
  if (extent <= padded) return;
  if (dilation == 1)
    fail("conv: kernel {} {} is larger than the padded input {} ({} {} with padding {} + {}); use a smaller kernel, "
         "more padding or a larger input",
         taps, axis, padded, size, axis, pad_lo, pad_hi);
  fail("conv: the dilated kernel spans {} {} ({} taps at dilation {}), larger than the padded input {} ({} {} with "
       "padding {} + {}); use a smaller kernel or dilation, more padding or a larger input",
       extent, axis, taps, dilation, padded, size, axis, pad_lo, pad_hi);
}

}  // namespace

ConvGeom ConvGeom::make(const Shape& x, const Shape& w, const ConvWindow& win) {
  if (x.size() != 4)
    fail("conv: input must be NHWC (rank 4) but has shape {}; flatten/reshape it upstream", shape_str(x));
  if (w.size() != 4) fail("conv: filter must be KRSC (rank 4) but has shape {}", shape_str(w));
  for (int64_t d : x)
    if (d <= 0) fail("conv: input shape {} has an empty dimension", shape_str(x));
  for (int64_t d : w)
    if (d <= 0) fail("conv: filter shape {} has an empty dimension", shape_str(w));
  check_window(win);
  check_channels(x, w, win.groups);
  ConvGeom g{};
  g.n = x[0], g.h = x[1], g.w = x[2], g.c = x[3];
  g.k = w[0], g.r = w[1], g.s = w[2];
  g.win = win;
  g.cg = g.c / win.groups, g.kg = g.k / win.groups;
  check_fits("rows", g.h, win.pad_top, win.pad_bottom, g.r, win.dilation_h);
  check_fits("columns", g.w, win.pad_left, win.pad_right, g.s, win.dilation_w);
  g.ho = win.out_h(g.h, g.r);
  g.wo = win.out_w(g.w, g.s);
  return g;
}

ConvGeom ConvGeom::make(const Shape& x, const Shape& w, int stride, int pad) {
  return make(x, w, ConvWindow::square(stride, pad));
}

}  // namespace kiln::cpu

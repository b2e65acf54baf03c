#pragma once
// Filter taps folded into channels: a convolution of an input with few channels (a network's
// first layer: 3 for RGB), which tensor cores run far from their rate, rewritten as an equal
// convolution with more channels and fewer taps. Along each axis, B taps of the filter become
// B times the channels:
//   - by stride (B = stride, the space-to-depth of MLPerf's ResNet stems): tap r = B·a + b lands
//     on tap a of a filter ceil(R/B) long, channel group b;
//   - whole (B = R): every tap becomes a channel group, the filter is 1 long.
// With xf[n, u, v, (bh·Bw + bw)·C + c] = x[n, stride·u + bh - pad, stride·v + bw - pad, c] (zero
// outside the image), y = conv(x, w) equals the stride-1, unpadded convolution of xf with
// wf[k, ah, aw, (bh·Bw + bw)·C + c] = w[k, Bh·ah + bh, Bw·aw + bw, c] (zero past the filter), its
// channels padded with zeros up to a multiple of 8. The same products are summed (with zeros
// added), so the results are those of the convolution, up to the order of its sums; and wgrad of
// the folded problem holds dw at the same places (unfold_filter_grad reads it back).
// ResNet's stem (3 channels, 7x7, stride 2) becomes 16 channels (12 used), 4x4; VGG's first layer
// (3 channels, 3x3, stride 1) 16 channels (9 used), 3x1, or 32 (27 used), 1x1.
// conv_stats_cuda.h and conv_wgrad_cuda.h time the folds beside their other ways at prepare
// (CudaOptions::fold_taps: by default the lean ones, below). The kernels only move elements: any io dtype of 2 or 4 bytes.
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

#include "ops/conv/conv_shape_cuda.h"

namespace kiln::cuda {

enum class TapFold {
  kByStride,    // both axes by the stride (stride >= 2)
  kWidthWhole,  // height by the stride, width whole
  kWhole,       // both axes whole: a 1x1 convolution
};
const char* tap_fold_name(TapFold f);

// Folded channels are at most this many (the input the fold writes grows with them).
constexpr int kTapFoldMaxChannels = 32;

// The folds that apply to `p`: an input whose channels are not a multiple of 8, folded into at
// most kTapFoldMaxChannels (used channels rounded up to 8). Empty where none applies.
std::vector<TapFold> tap_folds(const ConvShape& p);

// Whether a fold's input is at most twice the convolution's input: true of folding by stride
// (ResNet's stem: 1.4x), false of folding whole taps of a stride-1 filter (VGG's first layer: 5.3x
// and 10.7x, which cost VGG16-BN 0.59 GiB of workspace for 0.8% speed on the H200). The default,
// CudaOptions::fold_taps 1, times only these.
bool tap_fold_is_lean(const ConvShape& p, TapFold f);

// The folds CudaOptions::fold_taps `mode` offers for p: 0 none, 1 the lean ones, 2 every one.
std::vector<TapFold> tap_folds_for_mode(const ConvShape& p, int mode);

// The folded problem: the folded input's height and width, its channels, the filter's new taps,
// stride 1, no padding; the same n, k, output size and dtype.
ConvShape folded_shape(const ConvShape& p, TapFold f);

// Bytes of the folded input and of the folded filter (each a multiple of 256).
size_t folded_input_bytes(const ConvShape& p, TapFold f);
size_t folded_filter_bytes(const ConvShape& p, TapFold f);

// A folding way's workspace: the folded input, the folded filter (or its gradient), then the rest
// for the folded problem's own way. fold_scratch_bytes is what the first two take.
struct FoldScratch {
  void *input, *filter, *rest;
};
FoldScratch fold_scratch(const ConvShape& p, TapFold f, void* workspace);
size_t fold_scratch_bytes(const ConvShape& p, TapFold f);

// Enqueued on `stream`: xf from x, wf from w, and dw from the folded problem's filter gradient dwf.
void fold_input(const ConvShape& p, TapFold f, const void* x, void* xf, cudaStream_t stream, const std::string& where);
void fold_filter(const ConvShape& p, TapFold f, const void* w, void* wf, cudaStream_t stream,
                 const std::string& where);
void unfold_filter_grad(const ConvShape& p, TapFold f, const void* dwf, void* dw, cudaStream_t stream,
                        const std::string& where);

}  // namespace kiln::cuda

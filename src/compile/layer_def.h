#pragma once
// Each layer kind is described in one file beside the ops it emits, src/ops/<family>/*_layer.cpp
// (src/compile/*_layer.cpp for a layer that emits none): how its output shape follows from its
// inputs, which tensors it needs and which ops it emits for forward, backward and inference. The
// file defines `extern const LayerDef k<Name>Layer{<kind>, ...}`; the build collects every such
// definition (cmake/layer_defs.cmake), so no list is kept by hand.
#include <vector>

#include "compile/lower_context.h"
#include "core/conv_window.h"
#include "kiln/error.h"
#include "kiln/layer_graph.h"
#include "kiln/options.h"

namespace kiln {

struct LayerDef {
  LayerKind kind;
  // Output shape from input shapes; throws kiln::Error naming the layer and the fix.
  Shape (*infer_shape)(const Layer& layer, const std::vector<Shape>& inputs);
  // Declares the layer's tensors and emits its training-forward and inference ops.
  void (*lower_forward)(LowerContext& ctx, int layer);
  // Emits its backward ops (called in reverse topological order).
  void (*lower_backward)(LowerContext& ctx, int layer);
};

const LayerDef& layer_def(LayerKind kind);  // throws an internal kiln::Error for a kind without one
const std::vector<const LayerDef*>& all_layer_defs();  // generated

// Shared checks for shape inference.
const Shape& single_input(const Layer& layer, const std::vector<Shape>& inputs);
const Shape& single_nhwc_input(const Layer& layer, const std::vector<Shape>& inputs);
// Output size of a sliding window along one axis, padded by `pad_before` and `pad_after`; rejects a
// window larger than the padded input. (Its attributes were checked as the layer entered the graph:
// positive kernel and stride, padding >= 0, a pool's at most half its kernel.)
int64_t window_output(const Layer& layer, int64_t size, int kernel, int stride, int pad_before, int pad_after);
// What kiln's pooling kernels and fused convolutions run today: a square kernel, one stride for
// both axes and the same padding on all four sides. Anything else is refused before a program is
// built, naming the layer, the attribute and what is supported.
void require_square_window(const Layer& layer, int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_top,
                           int pad_left, int pad_bottom, int pad_right);
// Output shape of a convolution (conv, CBR, conv_bn: the layer's ConvAttrs, any window): checks
// the input, its channels against groups, and that the dilated kernel fits the padded input.
Shape conv_output_shape(const Layer& layer, const std::vector<Shape>& inputs);
// The window of a layer's convolution, as the op contracts carry it.
ConvWindow conv_window(const ConvAttrs& a);
// The fused convolution + BN ops (CBR, conv_bn) run a square kernel in a square window without
// dilation or groups (ConvWindow::is_square); the compiler fuses only such convolutions
// (is_fusable_conv), so a fused layer with another window was written by hand: refused, naming the
// layer and the fix.
bool is_fusable_conv(const ConvAttrs& a);
// Whether the fused Conv + BatchNorm ops run this convolution on `options`' target: a window they
// take (is_fusable_conv) and, on the GPU in fp16 or bf16, a multiple of 8 output channels (their
// kernels move 8 channels, 16 bytes, at a time). Any other stays Conv, BatchNorm and activation
// layers, which run every count (ShuffleNetV2 1.0x's branches have 58 channels).
bool fused_ops_run(const ConvAttrs& a, const CompileOptions& options);
void require_fusable_window(const Layer& layer);

// A weight (conv filters, a linear matrix) of these fans, started as `init` says: the program
// initializer it maps to, through LowerContext::param (kaiming_normal_fan_out() and torch_default()
// keep the program initializers kiln's first models started from, so they start as they did).
int weight_param(LowerContext& ctx, const std::string& name, const Shape& shape, const WeightInit& init,
                 int64_t fan_in, int64_t fan_out, bool compute_copy);
// A bias started as `init` says (TorchDefault: U(±1 / sqrt(fan_in))).
int bias_param(LowerContext& ctx, const std::string& name, const Shape& shape, BiasInit init, int64_t fan_in,
               bool compute_copy);

// The parameters and buffers of a fused convolution + BN layer (CBR, conv_bn), under the names of
// the layers it came from (<conv>.weight, <bn>.weight / .bias / .running_mean / .running_var), so
// checkpoints move between fused and unfused programs.
struct ConvBnParams {
  int weight;   // the master weight (gradients go to its own)
  int w;        // what the ops read: its compute copy in mixed precision
  int gamma, beta, running_mean, running_var;
};
ConvBnParams declare_conv_bn_params(LowerContext& ctx, int layer);

}  // namespace kiln

#pragma once
// Each layer kind is described in one file beside the ops it emits, src/ops/<family>/*_layer.cpp
// (src/compile/*_layer.cpp for a layer that emits none): how its output shape follows from its
// inputs, which tensors it needs and which ops it emits for forward, backward and inference. The
// file defines `extern const LayerDef k<Name>Layer{<kind>, ...}`; the build collects every such
// definition (cmake/layer_defs.cmake), so no list is kept by hand.
#include <vector>

#include "compile/lower_context.h"
#include "kiln/error.h"
#include "kiln/layer_graph.h"

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
// How much padding a sliding window accepts: a convolution any (zeros), a pooling window at most
// half its kernel (PyTorch's rule: more would let a window see padding only).
enum class WindowPadding { Any, AtMostHalfTheKernel };
// Output size of a sliding window; rejects non-positive kernel/stride, negative padding,
// padding the rule does not allow, and windows larger than the padded input.
int64_t window_output(const Layer& layer, int64_t size, int kernel, int stride, int padding, WindowPadding rule);
// Output shape of a convolution (conv, CBR): checks channels and window, names the layer.
Shape conv_output_shape(const Layer& layer, const std::vector<Shape>& inputs);

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

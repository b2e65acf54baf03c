#pragma once
#include "kiln/blueprint.h"
#include "kiln/layer_graph.h"
#include "kiln/memory_plan.h"
#include "kiln/options.h"
#include "kiln/program.h"

namespace kiln {

// Stages of the compiler, exposed for tests and `kiln plan`; compile() runs them all.
// Flattens the blueprint and infers shapes; with options.fuse_cbr off, each cbr() becomes Conv,
// BatchNorm and ReLU layers whose tensors keep the fused layer's names.
// An input too small for the model (its poolings and strides would shrink it to nothing) is a
// kiln::Error naming the input's size and the model's smallest (min_input_side).
LayerGraph expand(const Blueprint& blueprint, const CompileOptions& options);
// The smallest side s for which the model takes s x s inputs (of options.input_hwc's channels, or
// the blueprint's), found by running expand's shape inference on trial sizes up to 4096: the
// model takes any input whose height and width are both at least s. 0 when no size up to 4096
// works (the model fails for another reason).
int min_input_side(const Blueprint& blueprint, const CompileOptions& options);
// Run by compile() when options.fuse_cbr is on; only convolutions the fused ops run for options'
// target fuse (on the GPU in fp16 or bf16, a multiple of 8 output channels).
void fuse_conv_bn_relu(LayerGraph& graph, const CompileOptions& options = {});
// Then ResNet block ends: Add(BN(Conv), shortcut) -> ReLU becomes conv_bn + bn_add_relu layers.
void fuse_residual_tails(LayerGraph& graph, const CompileOptions& options = {});
// Conv (no bias, any window) -> BatchNorm -> ReLU or an activation layer, each the only consumer of
// the one before, that the passes above left, becomes one conv_bn_act layer (grouped, depthwise and
// dilated convolutions, other activations: src/ops/conv_bn_act/).
void fuse_conv_bn_activation(LayerGraph& graph);
// Marks the layers reading the data batch (first_layer: no dX), and, whatever input_grad asks,
// the layers reading a frozen layer's output.
void mark_first_layer(LayerGraph& graph);
// Marks layers 1..k frozen, k the last layer named `through` or inside the block of that name; a
// kiln::Error naming the model's blocks when no layer matches, or when nothing would be left to train.
void mark_frozen(LayerGraph& graph, const std::string& through);
// Fusion across layers (CompileOptions::fuse_seams): marks each CBR whose output feeds only CBR or
// conv_bn layers (seam_out) and those consumers (seam_in), which apply its BatchNorm + ReLU as they read.
void mark_seams(LayerGraph& graph);
void check_target_limits(const LayerGraph& graph, const CompileOptions& options);
Program lower(LayerGraph graph, const CompileOptions& options);

Program compile(const Blueprint& blueprint, const CompileOptions& options);

}  // namespace kiln

#pragma once
#include "kiln/blueprint.h"
#include "kiln/layer_graph.h"
#include "kiln/memory_plan.h"
#include "kiln/options.h"
#include "kiln/program.h"

namespace kiln {

// Stages of the compiler, exposed for tests and `kiln plan`; compile() runs them all.
LayerGraph expand(const Blueprint& blueprint, const CompileOptions& options);  // + shape inference
void fuse_conv_bn_relu(LayerGraph& graph);
void mark_first_layer(LayerGraph& graph);
void check_target_limits(const LayerGraph& graph, const CompileOptions& options);
Program lower(LayerGraph graph, const CompileOptions& options);

Program compile(const Blueprint& blueprint, const CompileOptions& options);

}  // namespace kiln

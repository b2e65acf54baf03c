#pragma once
// The columns of a linear layer that reads a channels-last flatten (Transpose (0, 2, 3, 1) ->
// Flatten, kiln's own H,W,C order, which kiln's exporter writes where dropout or an activation reads
// the flatten: AlexNet's classifier). The file holds them in that H,W,C order, which is the order
// kiln's imported flatten gives; but ImportedModel::weights are PyTorch's layouts, and kiln's loader
// (load_torch_weights, through torch_layout::flattened_maps) takes a linear layer after a flatten in
// PyTorch's C,H,W order and reorders it to H,W,C. So each such weight is put in C,H,W order here,
// exactly where the loader will reorder it back, and a note says so (as for a MatMul's transposed
// weight).
#include "import/onnx_import_context.h"
#include "kiln/layer_graph.h"

namespace kiln::onnx_import {

// `graph`: the imported Blueprint expanded (check_blueprint_shapes'), for the flattened maps' sizes.
void reorder_channels_last_columns(const LayerGraph& graph, ImportContext& ctx);

}  // namespace kiln::onnx_import

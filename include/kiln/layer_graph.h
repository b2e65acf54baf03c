#pragma once
// The compiler's middle representation: layers in topological order, each with resolved
// inputs and an inferred output shape (NHWC for feature maps, (N, F) once flattened).
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/layer_vocabulary.h"

namespace kiln {

struct Layer {
  std::string name;
  LayerKind kind = LayerKind::Input;
  LayerAttrs attrs;
  std::vector<int> inputs;  // indices of producing layers in LayerGraph::layers
  Shape out_shape;
  // CBR keeps the names of the layers it was fused from, so its tensors keep their names
  // ("<conv>.weight", "<bn>.gamma") and checkpoints move between fused and unfused programs.
  std::string conv_name, bn_name;
};

struct LayerGraph {
  std::vector<Layer> layers;  // layers[0] is the Input layer
  std::vector<std::vector<int>> consumers() const;
  int count(LayerKind kind) const;
};

}  // namespace kiln

#pragma once
// The compiler's middle representation: layers in topological order, each with resolved
// inputs and an inferred output shape (NHWC for feature maps, (N, F) once flattened).
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "kiln/layer_attrs.h"
#include "kiln/layer_kind_attrs.h"
#include "kiln/layer_vocabulary.h"

namespace kiln {

// What the compiler's passes decide about a layer (src/compile/passes.cpp, seams.cpp): not
// attributes of the model, which LayerAttrs holds as the author wrote them.
struct LayerMarks {
  // An input is the data batch (or a frozen layer's output): no dX of it is computed.
  bool first_layer = false;
  // CompileOptions::freeze: the layer runs as in inference (BN on its running statistics, no
  // dropout), has no backward, and the optimizer leaves its parameters alone.
  bool frozen = false;
  // CompileOptions::fuse_seams: seam_out, this CBR's BatchNorm + ReLU output is never written, its
  // consumers apply them as they read its convolution's output; seam_in, this CBR or conv_bn is
  // such a consumer.
  bool seam_out = false;
  bool seam_in = false;
};

struct Layer {
  std::string name;
  LayerKind kind = LayerKind::Input;
  LayerAttrs attrs;  // its kind's struct (kiln/layer_kind_attrs.h), none for a kind without
  LayerMarks marks;
  std::vector<int> inputs;  // indices of producing layers in LayerGraph::layers
  Shape out_shape;
  // CBR keeps the names of the layers it was fused from, so its tensors keep their names
  // ("<conv>.weight", "<bn>.gamma") and checkpoints move between fused and unfused programs.
  std::string conv_name, bn_name;
};

// "conv 'layer1.0.conv1'": how errors name a layer.
std::string layer_label(const Layer& layer);

// The layer's attributes as the struct T its kind holds (or holds as a part: a CBR's ConvAttrs);
// a kiln::Error naming the layer, its kind, what it holds and T otherwise.
template <class T>
const T& attrs_of(const Layer& layer) {
  if (const T* t = layer.attrs.find<T>()) return *t;
  return layer.attrs.get<T>(layer_label(layer));
}

struct LayerGraph {
  std::vector<Layer> layers;  // layers[0] is the Input layer
  std::vector<std::vector<int>> consumers() const;
  int count(LayerKind kind) const;
};

}  // namespace kiln

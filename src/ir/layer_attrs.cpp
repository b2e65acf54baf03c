// The attribute box's errors, and how they name a layer.
#include "kiln/layer_attrs.h"

#include "kiln/error.h"
#include "kiln/layer_graph.h"

namespace kiln {

void LayerAttrs::wrong_struct(std::string_view where, const char* wanted) const {
  fail("internal: {} holds {}, not the {} its kind's code reads; a layer's attributes must be its kind's struct",
       where, type_name(), wanted);
}

std::string layer_label(const Layer& layer) { return fmt::format("{} '{}'", layer_kind_name(layer.kind), layer.name); }

}  // namespace kiln

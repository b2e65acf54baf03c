#include "ir/fused_layer_kinds.h"

namespace kiln {

const char* fused_layer_kind_name(LayerKind kind) {
#define KILN_FUSED_LAYER_NAME(enumerator, name) \
  if (kind == fused_layer::enumerator) return name;
  KILN_FUSED_LAYER_KINDS(KILN_FUSED_LAYER_NAME)
#undef KILN_FUSED_LAYER_NAME
  return nullptr;
}

}  // namespace kiln

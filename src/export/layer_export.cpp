#include "export/layer_export.h"

namespace kiln {

const LayerExport* find_layer_export(LayerKind kind) {
  for (const LayerExport* e : all_layer_exports())
    if (e->kind == kind) return e;
  return nullptr;
}

}  // namespace kiln

#pragma once
// Carves an op's scratch pieces out of one backend workspace, each 256-byte aligned
// (core/scratch_layout.h). The same layout is computed when the op is prepared (to request the
// total) and when it runs.
#include "core/scratch_layout.h"

namespace kiln::cuda {

class WorkspaceLayout : public ScratchLayout {
 public:
  explicit WorkspaceLayout(void* base = nullptr) : ScratchLayout(base, 256) {}
};

}  // namespace kiln::cuda

#pragma once
// Fusion across layers (src/compile/seams.cpp) on the GPU, for the ops whose contracts carry its
// optional fields (CBR, conv_bn).
#include "kiln/error.h"
#include "runtime/op_call.h"

namespace kiln::cuda {

// The seam fields have no GPU kernels yet: a CUDA program compiled with them (whose memory plan
// `kiln plan` can show) is refused when an op that is given them is prepared.
inline void refuse_seam(bool seam, const OpCall& call) {
  if (seam)
    fail("{}: fusion across layers (--fuse-seams, CompileOptions::fuse_seams) has no GPU kernels yet; leave it "
         "off for --device cuda",
         call.where());
}

}  // namespace kiln::cuda

#pragma once
// load_torch_weights on tensors already in memory (src/train/torch_weights.cpp): the ONNX importer's
// initializers (kiln::load_imported_weights), which are no safetensors file, load through the same
// checks, layouts and messages as a state_dict does.
#include <string>

#include "kiln/safetensors.h"
#include "kiln/torch_weights.h"

namespace kiln {

// kiln::load_torch_weights(exe, path, options) with `file` as the file's contents; `path` names it
// in messages (and state_dict_text(file) says what it is: set file.metadata["source"] to describe it).
TorchWeightsLoaded load_torch_weights(Executable& exe, const SafetensorsFile& file, const std::string& path,
                                      const TorchWeightsOptions& options = {});

}  // namespace kiln

// load_imported_weights: the file's initializers become a state_dict in memory, each under the name
// kiln::torch_names gives its kiln tensor (the initializer's own name wherever the layer is named
// after it), and load through load_torch_weights: the same shape, dtype and value checks, layouts
// (OIHW filters to KRSC, a linear layer's C,H,W flatten columns to H,W,C) and messages as a
// state_dict file.
#include <fmt/format.h>

#include "kiln/onnx_import.h"
#include "train/torch_weights_in_memory.h"

namespace kiln {

TorchWeightsLoaded load_imported_weights(Executable& exe, const ImportedModel& model, const TorchWeightsOptions& options) {
  const std::map<std::string, std::string> names = torch_names(exe.program());
  SafetensorsFile file;
  // What the loader's messages call the tensors (state_dict_text reads "source").
  file.metadata["source"] = fmt::format("the initializers of the ONNX model '{}'", model.path);
  file.tensors.reserve(model.weights.size());
  for (const NamedTensor& w : model.weights) {
    NamedTensor t = w;
    // A tensor this program does not have keeps its file name: the loader lists it as not used.
    if (const auto kiln = model.kiln_tensor.find(w.name); kiln != model.kiln_tensor.end())
      if (const auto torch = names.find(kiln->second); torch != names.end()) t.name = torch->second;
    file.tensors.push_back(std::move(t));
  }
  return load_torch_weights(exe, file, model.path, options);
}

}  // namespace kiln

// export_torch_weights: the inverse of load_torch_weights (src/train/torch_weights.cpp), tensor by
// tensor: kiln's names to PyTorch's (kiln::torch_names), KRSC filters to OIHW, a flattened map's
// linear columns from H,W,C to C,H,W.
#include <cstring>
#include <set>

#include "export/model_metadata.h"
#include "export/output_path.h"
#include "export/weight_layouts.h"
#include "kiln/checkpoint.h"
#include "kiln/export.h"
#include "kiln/torch_weights.h"
#include "train/torch_layouts.h"

namespace kiln {
namespace {

NamedTensor f32(const std::string& name, Shape shape, const std::vector<float>& values) {
  NamedTensor t{name, DType::F32, std::move(shape), std::vector<std::byte>(values.size() * sizeof(float))};
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// The convolutions a BatchNorm follows, by weight name, with their output channels: fused (CBR,
// conv_bn) or a bias-free Conv whose one consumer is a BatchNorm.
std::map<std::string, int64_t> convolutions_before_bn(const Program& p) {
  std::map<std::string, int64_t> found;
  const auto consumers = p.graph.consumers();
  for (size_t i = 0; i < p.graph.layers.size(); ++i) {
    const Layer& l = p.graph.layers[i];
    const bool fused = !l.conv_name.empty() && !l.bn_name.empty();
    const bool before_bn = l.kind == LayerKind::Conv && !l.attrs.bias && consumers[i].size() == 1 &&
                           p.graph.layers[consumers[i][0]].kind == LayerKind::BatchNorm;
    if (fused) found[l.conv_name + ".weight"] = l.attrs.out_channels;
    if (before_bn) found[l.name + ".weight"] = l.attrs.out_channels;
  }
  return found;
}

}  // namespace

TorchExportSummary export_torch_weights(Executable& exe, const std::string& path, const TorchExportOptions& options) {
  export_layout::check_output_path(path, options.overwrite, "state_dict", "--overwrite (TorchExportOptions::overwrite)");
  const Program& p = exe.program();
  const Shape& result = p.graph.layers.back().out_shape;
  const int64_t classes = result.size() == 2 ? result[1] : 0;
  std::map<std::string, std::string> metadata = export_layout::model_metadata(options.info, classes);
  metadata["format"] = "pt";  // as safetensors.torch.save_file marks a PyTorch state_dict
  metadata["exported_by"] = fmt::format("kiln {}", kVersion);
  const std::map<std::string, std::string> names = torch_names(p);
  const std::map<std::string, Shape> flattened = torch_layout::flattened_maps(p.graph);
  const std::map<std::string, int64_t> before_bn =
      options.conv_bias_before_bn ? convolutions_before_bn(p) : std::map<std::string, int64_t>{};
  std::vector<NamedTensor> tensors;
  // In the program's order (each layer's tensors together, as a state_dict lists its modules').
  for (const TensorSpec& t : p.tensors) {
    const auto name = names.find(t.name);
    if (name == names.end()) continue;
    std::vector<float> values = export_layout::read_floats(exe, t.name);
    if (t.shape.size() == 4) {
      tensors.push_back(f32(name->second, torch_layout::oihw_shape(t.shape), torch_layout::krsc_to_oihw(values, t.shape)));
    } else if (auto map = flattened.find(t.name); map != flattened.end()) {
      tensors.push_back(f32(name->second, t.shape, torch_layout::hwc_columns_to_chw(values, t.shape[0], map->second)));
    } else {
      tensors.push_back(f32(name->second, t.shape, values));
    }
    if (auto conv = before_bn.find(t.name); conv != before_bn.end()) {
      const std::string module = name->second.substr(0, name->second.rfind('.'));
      tensors.push_back(f32(module + ".bias", {conv->second}, std::vector<float>(size_t(conv->second), 0.f)));
    }
  }
  save_safetensors(path, tensors, metadata);
  TorchExportSummary summary;
  summary.tensors = int(tensors.size());
  for (const NamedTensor& t : tensors) summary.bytes += int64_t(t.data.size());
  return summary;
}

}  // namespace kiln

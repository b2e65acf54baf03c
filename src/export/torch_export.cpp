// export_torch_weights: the inverse of load_torch_weights (src/train/torch_weights.cpp), tensor by
// tensor: each layer's tensors as its kind's export lists them (LayerExport::torch_params, in the
// kind's family folder), under kiln::torch_names' names, in their PyTorch layouts (OIHW filters, a
// flattened map's linear columns in C,H,W order).
#include <cstring>
#include <set>

#include "export/layer_export.h"
#include "export/model_metadata.h"
#include "export/output_path.h"
#include "export/weight_layouts.h"
#include "formats/torch/torch_layouts.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"
#include "kiln/export.h"
#include "kiln/torch_weights.h"

namespace kiln {
namespace {

NamedTensor f32(const std::string& name, Shape shape, const std::vector<float>& values) {
  NamedTensor t{name, DType::F32, std::move(shape), std::vector<std::byte>(values.size() * sizeof(float))};
  std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

// Every layer's tensors that a state_dict holds, in the layers' order (each layer's together, as a
// state_dict lists its modules'). They must be the tensors kiln::torch_names names, which
// load_torch_weights reads: a kind's export that lists another set is an internal error naming it.
std::vector<TorchParam> torch_params(const Program& p, const std::map<std::string, std::string>& names) {
  const ExportedGraph graph(p.graph);
  std::vector<TorchParam> params;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    const Layer& l = graph.layers[i];
    const LayerExport* e = find_layer_export(l.kind);
    if (!e)
      fail("layer '{}' ({}) has no PyTorch form in kiln's exporter: its kind has no LayerExport "
           "(src/export/layer_export.h says where one goes)", l.name, layer_kind_name(l.kind));
    const size_t first = params.size();
    if (e->torch_params) e->torch_params(graph, int(i), params);
    for (size_t k = first; k < params.size(); ++k)
      if (!names.count(params[k].tensor))
        fail("internal: layer '{}' ({}) exports '{}', which is not among the weights a state_dict holds "
             "(kiln::torch_names)", l.name, layer_kind_name(l.kind), params[k].tensor);
  }
  std::set<std::string> listed;
  for (const TorchParam& t : params)
    if (!listed.insert(t.tensor).second) fail("internal: '{}' is exported twice", t.tensor);
  for (const auto& [tensor, torch_name] : names)
    if (!listed.count(tensor))
      fail("internal: '{}' ('{}' in PyTorch) is in no layer's export: its layer kind's LayerExport::torch_params "
           "leaves it out", tensor, torch_name);
  return params;
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
  std::vector<NamedTensor> tensors;
  for (const TorchParam& t : torch_params(p, names)) {
    const std::string& name = names.at(t.tensor);
    const Shape& shape = p.tensors.at(size_t(exe.id(t.tensor))).shape;
    std::vector<float> values = export_layout::read_floats(exe, t.tensor);
    switch (t.layout) {
      case TorchLayout::AsIs:
        tensors.push_back(f32(name, shape, values));
        break;
      case TorchLayout::Filter:
        tensors.push_back(f32(name, torch_layout::oihw_shape(shape), torch_layout::krsc_to_oihw(values, shape)));
        break;
      case TorchLayout::FlattenedColumns:
        tensors.push_back(f32(name, shape, torch_layout::hwc_columns_to_chw(values, shape[0], t.map_hwc)));
        break;
    }
    if (t.zero_bias_before_bn && options.conv_bias_before_bn) {
      const std::string module = name.substr(0, name.rfind('.'));
      tensors.push_back(f32(module + ".bias", {shape[0]}, std::vector<float>(size_t(shape[0]), 0.f)));
    }
  }
  save_safetensors(path, tensors, metadata);
  TorchExportSummary summary;
  summary.tensors = int(tensors.size());
  for (const NamedTensor& t : tensors) summary.bytes += int64_t(t.data.size());
  return summary;
}

}  // namespace kiln

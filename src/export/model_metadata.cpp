#include "export/model_metadata.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/error.h"

namespace kiln {

ExportedModelInfo exported_model_info(const Trainer& trainer) {
  ExportedModelInfo info;
  for (const auto& [key, value] : trainer.recipe())
    if (key == "model") info.model = value;
  info.mean = trainer.normalization().mean;
  info.std = trainer.normalization().std;
  info.class_names = trainer.class_names();
  return info;
}

namespace export_layout {
namespace {

// As Trainer writes norm_mean and norm_std: 9 significant digits, which read back as the same float.
std::string join_floats(const std::vector<float>& v) {
  std::string s;
  for (float x : v) s += fmt::format("{}{:.9g}", s.empty() ? "" : ",", x);
  return s;
}

}  // namespace

std::map<std::string, std::string> model_metadata(const ExportedModelInfo& info, int64_t classes) {
  if (!info.class_names.empty() && int64_t(info.class_names.size()) != classes)
    fail("{} class names were given for a model of {} outputs; give one name per output, or none",
         info.class_names.size(), classes);
  if (info.mean.size() != info.std.size())
    fail("the normalization has {} means but {} standard deviations; give one of each per input channel",
         info.mean.size(), info.std.size());
  std::map<std::string, std::string> meta;
  if (!info.model.empty()) meta["model"] = info.model;
  if (!info.mean.empty()) meta["norm_mean"] = join_floats(info.mean);
  if (!info.std.empty()) meta["norm_std"] = join_floats(info.std);
  if (!info.class_names.empty()) meta["class_names"] = nlohmann::json(info.class_names).dump();
  return meta;
}

}  // namespace export_layout
}  // namespace kiln

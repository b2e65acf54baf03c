#pragma once
// What the exported files say about the model besides its weights (ExportedModelInfo), in the keys
// and texts of a kiln checkpoint's metadata, so one reader serves both.
#include <cstdint>
#include <map>
#include <string>

#include "kiln/export.h"

namespace kiln::export_layout {

// "model", "norm_mean", "norm_std" (comma-separated floats), "class_names" (a JSON array); empty
// fields left out. A kiln::Error when class names are given but not one per output of the `classes`.
std::map<std::string, std::string> model_metadata(const ExportedModelInfo& info, int64_t classes);

}  // namespace kiln::export_layout

#pragma once
// The rows of the data options (DataArgs, cli/data_options.h): where the data is, its format (the
// choices are the registry's, data/dataset_formats.h), the loader, who decodes, and how image files
// become samples and are augmented. The flags of `kiln train`, `eval` and `data-bench` come from
// these rows (add_data_options), and so do the checkpoint recipe's data half (cli/data_recipe.h:
// the rows a resumed run must match) and what `kiln eval` and `kiln predict` take from a
// checkpoint (SettingInfo::eval_adopts). DataArgs is the command line's struct (the library's
// DataOptions is made from it by data_options), so its rows live with it, in the tools.
#include <vector>

#include "cli/data_options.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over DataArgs, in the order --help lists them.
const std::vector<Setting>& data_settings();

// The row of `key` (a kiln::Error, internal, when there is none: the callers name rows that exist).
const Setting& data_setting(const char* key);

}  // namespace kiln::cli

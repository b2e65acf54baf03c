#pragma once
// The rows of the options every compiling command shares besides the compile settings
// (CommonOptions, cli/common_options.h): the model, the device and the class count. Their flags on
// `kiln plan`, `train` and `bench` come from these rows (add_common_options), and so does their
// line in `kiln settings`.
#include <vector>

#include "cli/common_options.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over CommonOptions: --model, --device, --classes.
const std::vector<Setting>& common_settings();

// The row of `key` (a kiln::Error, internal, when there is none: the callers name rows that exist).
const Setting& common_setting(const char* key);

}  // namespace kiln::cli

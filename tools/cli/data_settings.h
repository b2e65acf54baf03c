#pragma once
// The rows of the data options (DataArgs, cli/data_options.h): where the data is, its format (the
// choices are the registry's, data/dataset_formats.h), the loader and how image files become
// samples. The flags of `kiln train`, `eval` and `data-bench` come from these rows. DataArgs is the
// command line's struct (the library's DataOptions is made from it by data_options), so its rows
// live with it, in the tools.
//
// Not rows, each for a reason of its flag's shape: --channels (1 or 3, no range), --crop-scale and
// --crop-ratio (a pair MIN,MAX), --hflip/--no-hflip (three states: unset follows the transform),
// --skip-bad and --exif-orientation (flags without a --no- form), --decode (its refusal is
// parse_decode_device's, which data-bench's and train's messages build on).
#include <vector>

#include "cli/data_options.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over DataArgs, in the order --help lists them.
const std::vector<Setting>& data_settings();

// The row of `key` (a kiln::Error, internal, when there is none: the callers name rows that exist).
const Setting& data_setting(const char* key);

}  // namespace kiln::cli

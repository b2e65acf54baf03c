#pragma once
// The rows of `kiln predict`'s options (PredictArgs, cli/predict_command.h): the checkpoint and how
// it runs (--device, --precision, --batch; cli/checkpoint_run_settings.h's wording, shared with
// kiln eval), how many classes are listed (--top) and --json. Their flags, checks and help come
// from these rows (add_predict_command); the image files stay positionals.
#include <vector>

#include "cli/predict_command.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over PredictArgs, in the order --help lists them.
const std::vector<Setting>& predict_settings();

}  // namespace kiln::cli

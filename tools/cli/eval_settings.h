#pragma once
// The rows of `kiln eval`'s own options (EvalArgs, cli/eval_command.h): the checkpoint and how it
// runs (--device, --precision, --batch; cli/checkpoint_run_settings.h's wording, shared with kiln
// predict), the split evaluated and --json. Their flags, checks and help come from these rows
// (add_eval_command); the data's (--data, the transform, the loader) are data_settings.h's.
#include <vector>

#include "cli/eval_command.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over EvalArgs, in the order --help lists them.
const std::vector<Setting>& eval_settings();

}  // namespace kiln::cli

#pragma once
// The rows of `kiln train`'s own run options (TrainArgs, cli/train_command.h): where the run is
// kept and reported (--checkpoint, --json, --tensorboard), how it meets an existing checkpoint
// (--resume, --overwrite) and the weights it starts from (--init-from, --new-head). Their flags,
// help and --help type names come from these rows (add_train_command); the checks between them
// are check_train_options'. No row is compared on resume: they say where the run goes, not what
// it computes.
#include <vector>

#include "cli/train_command.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over TrainArgs, in the order --help lists them.
const std::vector<Setting>& train_run_settings();

// The row of `key` (a kiln::Error, internal, when there is none: the callers name rows that exist).
const Setting& train_run_setting(const char* key);

}  // namespace kiln::cli

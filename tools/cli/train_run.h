#pragma once
// `kiln train`'s run: the dataset opened and checked, the model compiled and trained with a
// progress line, a checkpoint per epoch, --json lines, a clean stop on Ctrl-C or SIGTERM, and the
// test accuracy at the end.
#include "cli/common_options.h"
#include "cli/train_command.h"

namespace kiln::cli {

// The exit code: 0 when training ran to its end, 128 + the signal after a clean stop (130
// SIGINT, 143 SIGTERM). A kiln::Error for what stopped it otherwise.
int run_train(const CommonOptions& common, const TrainArgs& args);

}  // namespace kiln::cli

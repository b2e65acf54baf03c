#pragma once
// `kiln eval --checkpoint C --data D`: a trained model's accuracy on a dataset's evaluation split,
// with the model, input geometry and image transform the checkpoint records.
#include <CLI/CLI.hpp>

#include <string>

#include "cli/data_options.h"

namespace kiln::cli {

struct EvalArgs {
  DataArgs data;
  std::string checkpoint, device = "auto", precision;  // precision: the checkpoint's unless given
  int batch = 0;                                       // 0: the checkpoint's
  std::string split = "val";                           // val | train (the training files, evaluation transform)
};

CLI::App* add_eval_command(CLI::App& app, EvalArgs& args);
int run_eval(EvalArgs args, const CLI::App& command);

}  // namespace kiln::cli

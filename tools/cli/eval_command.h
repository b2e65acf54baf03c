#pragma once
// `kiln eval --checkpoint C --data D`: a trained model on a dataset's evaluation split, with the
// model, input geometry and image transform the checkpoint records: top-1 and top-5 accuracy, the
// mean cross-entropy loss in eval mode and the accuracy of each class, as text or (--json) one
// JSON object. `kiln eval --model FILE.onnx --data D` does the same for a model file's weights
// (cli/model_file_eval.h says what it takes where a checkpoint would say).
#include <CLI/CLI.hpp>

#include <string>

#include "cli/data_options.h"

namespace kiln::cli {

// Its own fields are rows of cli/eval_settings.h, which give them their flags; the data's are
// data_settings.h's.
struct EvalArgs {
  DataArgs data;
  std::string checkpoint, device = "auto", precision;  // precision: the checkpoint's unless given
  std::string model;                                   // or a model file (FILE.onnx) with its weights
  int batch = 0;                                       // 0: the checkpoint's
  std::string split = "val";                           // val | train (the training files, evaluation transform)
  bool json = false;                                   // one JSON object on stdout instead of text
};

CLI::App* add_eval_command(CLI::App& app, EvalArgs& args);
int run_eval(EvalArgs args, const CLI::App& command);

}  // namespace kiln::cli

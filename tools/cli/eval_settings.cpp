#include "cli/eval_settings.h"

#include "cli/checkpoint_run_settings.h"

namespace kiln::cli {

const std::vector<Setting>& eval_settings() {
  using A = EvalArgs;
  static const std::vector<Setting> rows = {
      checkpoint_file_setting<A>(&A::checkpoint, "EvalArgs::checkpoint"),
      model_file_setting<A>(&A::model, "EvalArgs::model"),
      text_choice_setting<A>({.key = "split",
                              .flag = "--split",
                              .help = "val (the evaluation split) or train (the training files, evaluation transform)",
                              .member = "EvalArgs::split",
                              .fix = "use e.g. --split val (the default), or train"},
                             &A::split, {"val", "train"}),
      count_setting<A>({.key = "batch",
                        .flag = "--batch",
                        .alias = "-b",
                        .help = "batch size; 0: the checkpoint's (64 for --model)",
                        .member = "EvalArgs::batch",
                        .fix = "use e.g. --batch 64, or 0 (the default) for the checkpoint's"},
                       &A::batch, {0, 1 << 16}),
      checkpoint_device_setting<A>(&A::device, "EvalArgs::device"),
      checkpoint_precision_setting<A>(&A::precision, "EvalArgs::precision"),
      switch_setting<A>({.key = "json",
                         .flag = "--json",
                         .help = "print one JSON object (checkpoint, data, split, images, loss, top1, top5, "
                                 "per_class) instead of text",
                         .member = "EvalArgs::json",
                         .flag_only = true},
                        &A::json),
  };
  return rows;
}

}  // namespace kiln::cli

#include "cli/predict_settings.h"

#include "cli/checkpoint_run_settings.h"

namespace kiln::cli {

const std::vector<Setting>& predict_settings() {
  using A = PredictArgs;
  static const std::vector<Setting> rows = {
      checkpoint_file_setting<A>(&A::checkpoint, "PredictArgs::checkpoint"),
      model_file_setting<A>(&A::model, "PredictArgs::model"),
      count_setting<A>({.key = "image_size",
                        .flag = "--image-size",
                        .help = "with --model: the side of the square images the model is built for; 0: the "
                                "file's input size (a file that leaves it open needs this)",
                        .member = "PredictArgs::image_size",
                        .fix = "use e.g. --image-size 224, or 0 (the default) for the file's"},
                       &A::image_size, {0, 4096}),
      count_setting<A>({.key = "top",
                        .flag = "--top",
                        .alias = "-k",
                        .help = "classes listed per image, most probable first (at most the model's classes)",
                        .member = "PredictArgs::top",
                        .fix = "use e.g. --top 5 (the default)"},
                       &A::top, {1, 1 << 20}),
      count_setting<A>({.key = "batch",
                        .flag = "--batch",
                        .alias = "-b",
                        .help = "batch size; 0: the images' count, at most the checkpoint's batch (64 for "
                                "--model)",
                        .member = "PredictArgs::batch",
                        .fix = "use e.g. --batch 16, or 0 (the default) for the images' count"},
                       &A::batch, {0, 1 << 16}),
      checkpoint_device_setting<A>(&A::device, "PredictArgs::device"),
      checkpoint_precision_setting<A>(&A::precision, "PredictArgs::precision"),
      switch_setting<A>({.key = "json",
                         .flag = "--json",
                         .help = "print one JSON object (checkpoint, model, predictions) instead of text",
                         .member = "PredictArgs::json",
                         .flag_only = true},
                        &A::json),
  };
  return rows;
}

}  // namespace kiln::cli

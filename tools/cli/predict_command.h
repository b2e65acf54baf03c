#pragma once
// `kiln predict --checkpoint C IMAGE... [--top K] [--json]`: the classes a trained model gives image
// files, each decoded and transformed as `kiln eval` transforms the checkpoint's evaluation images
// (the ImageNet resize and center crop, or images used at the model's own size), run in eval mode,
// with softmax probabilities.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace kiln::cli {

// Its fields but the images (positionals) are rows of cli/predict_settings.h, which give them their flags.
struct PredictArgs {
  std::string checkpoint, device = "auto", precision;  // precision: the checkpoint's unless given
  std::vector<std::string> images;
  int top = 5;    // classes listed per image (at most the model's)
  int batch = 0;  // 0: the images' count, at most the checkpoint's batch
  bool json = false;
};

CLI::App* add_predict_command(CLI::App& app, PredictArgs& args);
int run_predict(const PredictArgs& args);

}  // namespace kiln::cli

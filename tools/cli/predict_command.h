#pragma once
// `kiln predict --checkpoint C IMAGE... [--top K] [--json]`: the classes a trained model gives image
// files, each decoded and transformed as `kiln eval` transforms the checkpoint's evaluation images
// (the ImageNet resize and center crop, or images used at the model's own size), run in eval mode,
// with softmax probabilities. `kiln predict --model FILE.onnx IMAGE...` does the same for a model
// file's weights: images of the file's size are used as they are, others resized and center-cropped
// as ImageNet's evaluation does (cli/model_file_eval.h says how they are normalized).
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace kiln::cli {

// Its fields but the images (positionals) are rows of cli/predict_settings.h, which give them their flags.
struct PredictArgs {
  std::string checkpoint, device = "auto", precision;  // precision: the checkpoint's unless given
  std::string model;   // or a model file (FILE.onnx) with its weights
  int image_size = 0;  // --model: the side of the square images it is built for; 0: the file's
  std::vector<std::string> images;
  int top = 5;    // classes listed per image (at most the model's)
  int batch = 0;  // 0: the images' count, at most the checkpoint's batch
  bool json = false;
};

CLI::App* add_predict_command(CLI::App& app, PredictArgs& args);
int run_predict(const PredictArgs& args);

}  // namespace kiln::cli

#pragma once
// `kiln eval --model FILE.onnx` and `kiln predict --model FILE.onnx`: a model file's architecture
// and weights run in eval mode as the file holds them, with no training run and checkpoint between
// (a model trained in PyTorch, or exported by kiln). What a checkpoint records and a file may not,
// these choose:
// - normalization: the file's metadata (norm_mean, norm_std: kiln's exports write them) under
//   --normalize auto; otherwise what --normalize says of the data, as kiln train would normalize it
//   (ImageNet's mean and std for the imagenet transform of RGB images), with a note, since a file
//   that does not say (PyTorch's exports) cannot be checked;
// - class names: the file's metadata (class_names), else the data's; data naming its classes
//   otherwise, or counting other classes, is refused, since labels would not match outputs;
// - precision fp32 and batch 64 unless given: the file records no run.
#include <memory>
#include <string>
#include <vector>

#include "cli/checkpoint_model.h"
#include "cli/model_source.h"
#include "kiln/data.h"
#include "kiln/trainer.h"

namespace kiln::cli {

// The batch a model file's eval-mode passes take when --batch is 0.
inline constexpr int kModelFileEvalBatch = 64;

// `command` (eval, predict) was given exactly one of --checkpoint and --model, and --model names a
// model file: a kiln::Error saying what to give otherwise.
void check_checkpoint_or_model_file(const std::string& command, const std::string& checkpoint,
                                    const std::string& model);

struct FileEvaluation {
  ModelSource source;
  std::unique_ptr<Trainer> trainer;  // compiled for the data's images, the file's weights loaded
  int classes = 0;                   // the model's outputs
};

// The file `model` built for the images of `data` (the `split` split of the data at `path`, made as
// the data options said) and ready for eval-mode passes over it. `normalize` is --normalize. Notes
// (the file's, and how inputs are normalized) go to stderr. A kiln::Error for data of other channels
// or another class count than the file's model, or naming its classes otherwise.
FileEvaluation file_evaluation(const std::string& model, const std::string& normalize, const SampleSource& data,
                               const std::string& path, const std::string& split, const EvalRun& run);

// For predict, where images come one by one without a dataset: the file built for `height` x
// `width` images (0: the file's own size), normalized with the file's metadata, else with ImageNet's
// mean and std for a 3-channel model (a note says so); a kiln::Error for any other model whose file
// does not say.
FileEvaluation file_prediction(const std::string& model, int height, int width, const EvalRun& run);

}  // namespace kiln::cli

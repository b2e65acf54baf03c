#pragma once
// How `kiln train --model FILE.onnx` takes what the file says of the data its weights were trained
// on (cli/model_file_metadata.h), when the run starts from those weights (not --no-weights, not
// --init-from):
// - Normalization: with --normalize auto (the default), the file's mean and std, which its weights
//   expect, rather than the data's statistics or ImageNet's; --normalize imagenet or dataset
//   normalizes as it says, and a note names what the file held. The checkpoint records what was
//   used (Trainer's norm_mean and norm_std), so eval, predict, export and --resume keep it.
// - Class names, while the file's last layer is kept (the same class count, no --new-head): data
//   naming its classes otherwise is refused, since the file's output for one class would be taught
//   to mean another; --new-head starts that layer afresh for the data's classes. Data naming none
//   (IDX, CIFAR-10) takes the file's names, which the checkpoint records for eval and predict.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/model_source.h"
#include "cli/train_command.h"
#include "kiln/data.h"

namespace kiln::cli {

struct FileDataUse {
  std::optional<ChannelStats> normalization;  // the file's, where the run normalizes with it
  std::vector<std::string> class_names;       // the file's, where the data names no classes
  std::vector<std::string> notes;             // for the user, one sentence each, "kiln: <file>: <note>"
};

// What the run takes of `source`'s metadata, training on `train` (the data at `data`) with a model
// of `classes` outputs and `channels` input channels; nothing for a zoo model. A kiln::Error for a
// metadata value the run would use that is malformed (model_file_metadata.h), and for data whose
// class names differ from the file's while the file's last layer is kept.
FileDataUse file_data_use(const ModelSource& source, const TrainArgs& a, const SampleSource& train,
                          const std::string& data, int classes, int channels);

// `train` as the Trainer takes it under `use`: the same samples, with the file's normalization as
// its channel statistics and the file's class names where it names none; nullptr when `use`
// changes nothing (train from `train` itself). Holds a reference to `train`.
std::unique_ptr<SampleSource> with_file_data(const SampleSource& train, const FileDataUse& use);

}  // namespace kiln::cli

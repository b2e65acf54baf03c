#pragma once
// What `kiln eval` and `kiln predict` take from a checkpoint written by `kiln train`: the model,
// its input and classes, how it was compiled and how its data became samples (the recipe in the
// metadata), and a Trainer holding its weights for eval-mode passes.
#include <CLI/CLI.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cli/data_options.h"
#include "kiln/data.h"
#include "kiln/trainer.h"

namespace kiln::cli {

struct CheckpointModel {
  std::string path, model;
  int classes = 0, batch = 0;
  std::string precision;
  SampleShape input;  // the images the model was compiled for
  std::map<std::string, std::string> metadata;
  // Its recipe's value for `key` ("recipe.<key>"), or "" when it records none (data settings
  // are recorded for image folders and packed files only).
  std::string recipe(const std::string& key) const;
};

// Reads the checkpoint's metadata (the whole file is validated, checksums included). A file that is
// not a kiln train checkpoint, or lacks a setting, is a kiln::Error naming the file and the setting.
CheckpointModel read_checkpoint_model(const std::string& path);

// The checkpoint's data settings that decide how evaluation images become samples (the data rows
// marked SettingInfo::eval_adopts: transform, image size, eval resize, channels, EXIF orientation)
// into `d`, except those the command line `cmd` gave (nullptr: a command without those options). A
// recorded value its row refuses is a kiln::Error naming the checkpoint, the key and the flag.
void adopt_data_recipe(const CheckpointModel& m, const CLI::App* cmd, DataArgs& d);

struct EvalRun {
  std::string device = "auto", precision;  // precision: the checkpoint's when empty
  int batch = 0;                           // 0: the checkpoint's
  int workers = 2;
};
// The checkpoint's model compiled for `input` images, eval mode ready, its weights, normalization
// and class names loaded.
std::unique_ptr<Trainer> evaluation_trainer(const CheckpointModel& m, const SampleShape& input, const EvalRun& run);

// The name of class `label`: the checkpoint's, or the index when it names none.
std::string class_name(const Trainer& trainer, int label);

}  // namespace kiln::cli

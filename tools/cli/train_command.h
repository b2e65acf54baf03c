#pragma once
// `kiln train`'s options: what they are, their checks one by one as CLI11 reads them, and the
// checks between them after parsing (check_train_options). The run itself is train_run.h's.
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "cli/backend_options.h"
#include "cli/common_options.h"
#include "cli/data_parallel_options.h"
#include "cli/data_options.h"
#include "cli/optimizer_options.h"
#include "kiln/options.h"
#include "kiln/trainer.h"

namespace kiln::cli {

struct TrainArgs {
  DataArgs data;  // --data, --format, --workers, the image transform (add_data_options)
  // --optimizer and the optimizers' flags; kiln train decays weights by 5e-4 unless told otherwise.
  OptimizerArgs optimizer{.defaults = {{"weight_decay", 5e-4}}};
  // What the rows of train/train_settings.h write: --epochs, the schedule's flags, --seed. kiln
  // train's peak learning rate is 0.05 (the library's 0.1).
  TrainOptions train = [] {
    TrainOptions t;
    t.schedule.lr = 0.05f;
    return t;
  }();
  // The run's own flags, rows of cli/train_run_settings.h; check_train_options checks them together.
  std::string checkpoint;
  std::string json;  // --json FILE: one line per epoch
  std::string tensorboard;  // --tensorboard DIR: TensorBoard event files
  bool resume = false, overwrite = false;
  std::string init_from;  // --init-from: PyTorch weights to start from
  bool new_head = false;  // --new-head: leave the classifier as initialized
  bool no_weights = false;  // --no-weights: a --model file's architecture from kiln's initialization
  BackendArgs backend;              // --threads and the CUDA backend's options
  DataParallelArgs parallel;        // --gpus and the other launch options
};

// The "train" subcommand with `common` (shared with plan and bench) and its own options in `args`.
// args.backend.cpu.threads must hold its default (kiln::threads()) already: --help shows it.
CLI::App* add_train_command(CLI::App& app, CommonOptions& common, TrainArgs& args);

// Checks between options, after parsing: still errors naming the flags (CLI::ParseError), before
// any work. `model` is --model's value (--new-head replaces the last layer of an ONNX file's model).
void check_train_options(const TrainArgs& args, const std::string& model);

}  // namespace kiln::cli

#pragma once
// Training loop: batches from a loader -> copy in -> forward (+loss) -> backward -> fused
// optimizer update, with a learning-rate schedule, evaluation and checkpoints.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/blueprint.h"
#include "kiln/data.h"
#include "kiln/executable.h"
#include "kiln/options.h"
#include "kiln/schedule.h"

namespace kiln {

struct TrainOptions {
  int epochs = 10;
  LrSchedule schedule;
  uint64_t seed = 1;
  Augment augment;
  int workers = 2;
  std::string checkpoint;  // written atomically after every epoch when non-empty
  bool resume = false;     // continue from `checkpoint` if it exists
};

struct StepReport {
  int epoch = 0;
  int64_t step_in_epoch = 0, steps_per_epoch = 0;
  double loss = 0, images_per_second = 0, eta_seconds = 0;
};

struct EpochReport {
  int epoch = 0;
  double train_loss = 0, train_accuracy = 0, test_accuracy = 0;
  double seconds = 0, images_per_second = 0;
};

class Trainer {
 public:
  Trainer(const Blueprint& blueprint, const CompileOptions& options, TrainOptions train);
  ~Trainer();

  Executable& executable() { return *exe_; }

  // Trains for the configured epochs (from the resumed epoch, if any), evaluating on `test`
  // after each epoch. Callbacks may be empty.
  std::vector<EpochReport> fit(const Dataset& train, const Dataset& test,
                               const std::function<void(const StepReport&)>& on_step = {},
                               const std::function<void(const EpochReport&)>& on_epoch = {});
  // Top-1 accuracy in eval mode (running BN statistics, no dropout).
  double evaluate(const Dataset& data);
  // One training step on an already normalized NHWC batch; returns the loss.
  double step(const Batch& batch, float lr);

  // Checkpoint: parameters and buffers by layer-graph tensor name, optimizer state, progress.
  void save_checkpoint(const std::string& path, int epochs_done);
  int load_checkpoint(const std::string& path);  // returns the number of epochs done

  const ChannelStats& normalization() const { return norm_; }

 private:
  void check_dataset(const Dataset& data, const char* which) const;
  void copy_in(const Batch& batch);
  // The top-1 hits a COUNT_CORRECT op wrote (Program::train_correct / inference_correct).
  int64_t correct_in(int count_id);
  std::unique_ptr<Executable> exe_;
  TrainOptions opt_;
  ChannelStats norm_;
  int64_t global_step_ = 0;
  int epochs_done_ = 0;
};

}  // namespace kiln

#pragma once
// `kiln train --tensorboard DIR`: what a run reports, as TensorBoard scalars. Per epoch (step = the
// epoch, from 1): train/loss, train/accuracy, test/accuracy and test/top5 (with a test set), lr (the
// epoch's first step's), images_per_second and, with dynamic loss scaling, loss_scale. Each time the
// trainer reads the loss (StepReport; about twice a second): train/step_loss, the mean loss of the
// steps since the last read, at the optimizer step (from 1).
#include <memory>
#include <string>

#include "formats/tensorboard/tensorboard_writer.h"
#include "kiln/trainer.h"

namespace kiln::cli {

class TrainEvents {
 public:
  // No folder: every call does nothing.
  explicit TrainEvents(const std::string& dir);
  void on_step(const StepReport& s);
  void on_epoch(const EpochReport& r, bool tested);
  // The event file ("" without a folder).
  std::string path() const { return writer_ ? writer_->path() : std::string(); }

 private:
  std::unique_ptr<TensorBoardWriter> writer_;
  int epoch_ = -1;              // of the last step report
  int64_t steps_read_ = 0;      // its step in that epoch
  double loss_sum_read_ = 0;    // and the sum of that epoch's losses up to it
};

}  // namespace kiln::cli

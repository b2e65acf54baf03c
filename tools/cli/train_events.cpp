#include "cli/train_events.h"

namespace kiln::cli {

TrainEvents::TrainEvents(const std::string& dir) {
  if (!dir.empty()) writer_ = std::make_unique<TensorBoardWriter>(dir);
}

void TrainEvents::on_step(const StepReport& s) {
  if (!writer_ || s.step_in_epoch <= 0) return;
  // StepReport::loss is the epoch's running mean: the steps since the last read are the difference.
  if (s.epoch != epoch_) epoch_ = s.epoch, steps_read_ = 0, loss_sum_read_ = 0;
  const double sum = s.loss * double(s.step_in_epoch);
  if (s.step_in_epoch <= steps_read_) return;
  const double mean = (sum - loss_sum_read_) / double(s.step_in_epoch - steps_read_);
  steps_read_ = s.step_in_epoch, loss_sum_read_ = sum;
  writer_->scalars(int64_t(s.epoch) * s.steps_per_epoch + s.step_in_epoch, {{"train/step_loss", float(mean)}});
}

void TrainEvents::on_epoch(const EpochReport& r, bool tested) {
  if (!writer_) return;
  std::vector<TensorBoardScalar> v = {{"train/loss", float(r.train_loss)},
                                      {"train/accuracy", float(r.train_accuracy)}};
  if (tested) {
    v.push_back({"test/accuracy", float(r.test_accuracy)});
    v.push_back({"test/top5", float(r.test_top5_accuracy)});
  }
  v.push_back({"lr", float(r.lr)});
  v.push_back({"images_per_second", float(r.images_per_second)});
  if (r.loss_scale > 0) v.push_back({"loss_scale", float(r.loss_scale)});
  writer_->scalars(r.epoch + 1, v);
}

}  // namespace kiln::cli

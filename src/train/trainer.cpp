#include "kiln/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "data/gpu_decode/gpu_decode_loader.h"
#include "data/transforms.h"
#include "ops/loss/totals_slots.h"
#include "train/non_finite_text.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

TrainOptions checked(TrainOptions t) {
  if (t.epochs <= 0) fail("epochs must be positive, got {}", t.epochs);
  if (!(t.schedule.lr > 0) || !std::isfinite(t.schedule.lr))
    fail("learning rate must be positive and finite, got {}", t.schedule.lr);
  if (t.schedule.warmup_epochs < 0)
    fail("warm-up epochs must be >= 0, got {} (TrainOptions::schedule.warmup_epochs, kiln train --warmup)",
         t.schedule.warmup_epochs);
  if (t.schedule.warmup_epochs >= t.epochs)
    fail("a warm-up of {} epochs is not shorter than the run ({} epochs): the learning rate would only rise, never "
         "reaching its peak before the last step nor decaying; make TrainOptions::schedule.warmup_epochs (kiln train "
         "--warmup) smaller than the epochs", t.schedule.warmup_epochs, t.epochs);
  if (t.resume && t.checkpoint.empty())
    fail("resuming needs the checkpoint to continue from: set TrainOptions::checkpoint (kiln train --checkpoint PATH)");
  if (t.resume && t.overwrite)
    fail("resume and overwrite exclude each other: resume continues the run in the checkpoint, overwrite replaces "
         "it with a fresh run; set one (kiln train --resume or --overwrite)");
  if (!(t.rank_timeout >= 0) || !std::isfinite(t.rank_timeout))
    fail("TrainOptions::rank_timeout (kiln train --rank-timeout) must be finite and >= 0 seconds (0: no watchdog), "
         "got {}", t.rank_timeout);
  if (!(t.report_seconds >= 0) || !std::isfinite(t.report_seconds))
    fail("TrainOptions::report_seconds must be finite and >= 0 (0 reads the totals after every step), got {}",
         t.report_seconds);
  return t;
}

// The checkpoint's lock, taken before the rule on an existing file is applied: a file that
// another run is writing is reported as that (resume or overwrite would not help).
std::unique_ptr<CheckpointLock> lock_checkpoint(const TrainOptions& t, const CompileOptions& c) {
  if (t.checkpoint.empty() || (c.data_parallel && c.data_parallel->rank() != 0)) return nullptr;
  auto lock = std::make_unique<CheckpointLock>(t.checkpoint);
  check_checkpoint_target(t);  // a throw here releases the lock
  return lock;
}

}  // namespace

Trainer::Trainer(const Blueprint& blueprint, const CompileOptions& options, TrainOptions train)
    : opt_(checked(std::move(train))),
      lock_(lock_checkpoint(opt_, options)),
      model_name_(blueprint.name()),
      exe_(std::make_unique<Executable>(compile(blueprint, options), opt_.seed)),
      group_(options.data_parallel.get()) {
  if (opt_.resume && std::filesystem::exists(opt_.checkpoint)) {
    saved_epochs_ = epochs_done_ = resumed_epochs_ = load_checkpoint(opt_.checkpoint);
    resumed_ = true;
  }
  // Every rank starts from rank 0's state (the same seed gives the same values; this makes sure).
  exe_->broadcast_state_from_rank0();
}

int Trainer::ranks() const { return group_ ? group_->ranks() : 1; }

bool Trainer::writes_checkpoints() const { return !opt_.checkpoint.empty() && (!group_ || group_->rank() == 0); }

std::vector<double> Trainer::read_training_totals(bool& stop_agreed) {
  std::vector<double> totals = read_totals(exe_->program().train_totals);
  const bool stop_here = opt_.stop != nullptr && opt_.stop->load(std::memory_order_relaxed);
  if (!group_) {
    stop_agreed = stop_here;
    return totals;
  }
  // The earliest bad step as the largest of its negation (-1, none, stays the smallest).
  const double bad = totals[kFirstBadStep];
  std::vector<double> sums = {totals[kLossSum], totals[kHitsSum], totals[kTop5HitsSum], totals[kStepsCounted],
                              bad >= 0 ? 1.0 : 0.0};
  std::vector<double> maxima = {bad >= 0 ? -bad : -1e300, stop_here ? 1.0 : 0.0};
  group_->reduce_host(sums, HostReduce::Sum);
  group_->reduce_host(maxima, HostReduce::Max);
  group_->progress();
  totals[kLossSum] = sums[0] / group_->ranks();  // the mean of the ranks' mean losses: the global batch's
  totals[kHitsSum] = sums[1], totals[kTop5HitsSum] = sums[2], totals[kStepsCounted] = sums[3] / group_->ranks();
  totals[kFirstBadStep] = sums[4] > 0 ? -maxima[0] : -1;
  if (sums[4] > 0 && bad < 0) totals[kFirstBadLoss] = std::nan("");  // another rank's loss
  stop_agreed = maxima[1] > 0;
  return totals;
}

Trainer::~Trainer() = default;  // lock_ goes with it: "<checkpoint>.lock" is removed

std::vector<std::string> Trainer::removed_temp_files() const {
  return lock_ ? lock_->removed_temp_files() : std::vector<std::string>{};
}

void Trainer::check_dataset(const SampleSource& data, const char* which) const {
  const Shape& in = exe_->program().tensors[exe_->program().input].shape;
  if (data.count() <= 0) fail("{} set is empty", which);
  const SampleShape s = data.shape();
  if (s.height != in[1] || s.width != in[2] || s.channels != in[3])
    fail("{} set has {}x{}x{} images but the model was compiled for {}x{}x{} inputs (CompileOptions::input_hwc, or "
         "the blueprint's input()); compile it for the data's size (kiln train does: the training set's)", which,
         s.height, s.width, s.channels, in[1], in[2], in[3]);
  const int64_t classes = exe_->program().tensors[exe_->program().logits].shape[1];
  if (data.num_classes() > classes)
    fail("{} set has {} classes but the model outputs {}", which, data.num_classes(), classes);
}

std::unique_ptr<BatchStream> Trainer::training_batches(const SampleSource& train, int batch) const {
  // Auto: the GPU path wherever it can run (a CUDA run, nvJPEG built in, JPEG files through the
  // ImageNet transform): it takes work only when the CPU threads fall behind (gpu_decode_loader.h).
  // Each rank its own share of every epoch, cut from the same order whatever the rank count.
  const LoaderShard shard{group_ ? group_->rank() : 0, ranks()};
  GpuCropPlan probe;
  const bool gpu_possible = pixels_to_device() && gpu_decode_built() && train.plan_gpu_crop(0, opt_.seed, 0, probe);
  if (opt_.decode == DecodeDevice::Gpu || (opt_.decode == DecodeDevice::Auto && gpu_possible)) {
    if (!pixels_to_device())
      fail("--decode gpu needs a CUDA run with an fp32 input; use --device cuda, or --decode cpu");
    GpuDecodeSettings g;
    g.batch = batch, g.seed = opt_.seed, g.workers = opt_.workers;
    g.gpu_lead = opt_.decode == DecodeDevice::Gpu ? 2 : 1;
    g.device = exe_->program().options.device_index;
    g.shard = shard;
    return make_gpu_decode_loader(train, g);
  }
  auto loader = std::make_unique<BatchLoader>(train, batch, true, true, norm_.mean, norm_.std, opt_.seed, opt_.workers,
                                              4, shard);
  loader->deliver_pixels(pixels_to_device());
  return loader;
}

bool Trainer::pixels_to_device() const {
  const Program& p = exe_->program();
  return p.options.device == Device::CUDA && p.tensors[p.input].dtype == DType::F32;
}

void Trainer::copy_in(const Batch& batch) {
  const Program& p = exe_->program();
  const TensorSpec& input = p.tensors[p.input];
  if (batch.device) {
    const PixelAffine affine = make_pixel_affine(norm_.mean, norm_.std, input.shape[3]);
    exe_->write_device_pixels_ordered(p.input, *batch.device, size_t(numel(input.shape)), affine.scale, affine.bias);
    exe_->write_ordered(p.label, batch.labels.data(), batch.labels.size() * sizeof(int32_t));
    return;
  }
  if (!batch.pixels.empty()) {
    if (int64_t(batch.pixels.size()) != numel(input.shape))
      fail("batch holds {} pixels but the program's input needs {}", batch.pixels.size(), numel(input.shape));
    const PixelAffine affine = make_pixel_affine(norm_.mean, norm_.std, input.shape[3]);
    exe_->write_pixels_ordered(p.input, batch.pixels.data(), batch.pixels.size(), affine.scale, affine.bias);
    exe_->write_ordered(p.label, batch.labels.data(), batch.labels.size() * sizeof(int32_t));
    return;
  }
  if (int64_t(batch.images.size()) != numel(input.shape))
    fail("batch holds {} values but the program's input needs {}", batch.images.size(), numel(input.shape));
  if (input.dtype == DType::F64) {
    std::vector<double> wide(batch.images.begin(), batch.images.end());
    exe_->write_ordered(p.input, wide.data(), wide.size() * sizeof(double));
  } else if (input.dtype == DType::F32) {
    exe_->write_ordered(p.input, batch.images.data(), batch.images.size() * sizeof(float));
  } else {
    fail("the trainer feeds fp32 batches; input dtype {} needs a cast op (not built yet)", dtype_name(input.dtype));
  }
  exe_->write_ordered(p.label, batch.labels.data(), batch.labels.size() * sizeof(int32_t));
}

void Trainer::reset_totals(int totals_id) {
  if (totals_id < 0) fail("this program keeps no loss and hit totals; compile it with a loss");
  std::vector<double> none(kTotalsSlots, 0.0);
  none[kFirstBadStep] = -1;
  exe_->write_ordered(totals_id, none.data(), none.size() * sizeof(double));
}

std::vector<double> Trainer::read_totals(int totals_id) { return exe_->read<double>(totals_id); }

double Trainer::step(const Batch& batch, float lr) {
  enqueue_step(batch, lr);
  const int loss = exe_->program().loss;
  const double value =
      exe_->program().tensors[loss].dtype == DType::F64 ? exe_->read<double>(loss)[0] : exe_->read<float>(loss)[0];
  if (!std::isfinite(value))
    fail("optimizer step {} gave a non-finite loss ({}) at learning rate {}: the model has diverged; lower the "
         "learning rate or add warm-up", global_step_, value, lr);
  return value;
}

void Trainer::enqueue_step(const Batch& batch, float lr) {
  copy_in(batch);
  StepScalars s{lr, global_step_, opt_.seed};
  exe_->run_step(s);
  ++global_step_;
}

double Trainer::evaluate(const Dataset& data) { return evaluate(DatasetSource(data)); }

double Trainer::evaluate(const SampleSource& data) { return evaluate_accuracy(data).top1; }

Trainer::Accuracy Trainer::evaluate_accuracy(const SampleSource& data) {
  check_dataset(data, "evaluation");
  const Program& p = exe_->program();
  const int batch = int(p.tensors[p.input].shape[0]);
  BatchLoader loader(data, batch, false, false, norm_.mean, norm_.std, opt_.seed, opt_.workers);
  loader.deliver_pixels(pixels_to_device());
  loader.start_epoch(0);
  Batch b;
  // The hits add up on the device; one read at the end.
  reset_totals(p.inference_totals);
  while (loader.next(b)) {
    if (group_) group_->progress();
    // The padding rows of a last partial batch are labelled -1, which COUNT_CORRECT never counts.
    for (int64_t i = b.size; i < int64_t(b.labels.size()); ++i) b.labels[i] = -1;
    copy_in(b);
    exe_->run_inference({0.f, global_step_, opt_.seed});
  }
  const std::vector<double> totals = read_totals(p.inference_totals);
  return {totals[kHitsSum] / double(data.count()), totals[kTop5HitsSum] / double(data.count())};
}

std::vector<EpochReport> Trainer::fit(const Dataset& train, const Dataset& test,
                                      const std::function<void(const StepReport&)>& on_step,
                                      const std::function<void(const EpochReport&)>& on_epoch) {
  return fit(DatasetSource(train, opt_.augment), DatasetSource(test), on_step, on_epoch);
}

std::vector<EpochReport> Trainer::fit(const SampleSource& train, const SampleSource& test,
                                      const std::function<void(const StepReport&)>& on_step,
                                      const std::function<void(const EpochReport&)>& on_epoch) {
  check_dataset(train, "training");
  if (train.num_classes() < 2)
    fail("the training set holds {} class{}: every label is the same, so a model learns nothing about the images "
         "(its loss goes to 0 and its accuracy to 1.0 on anything); a classifier needs at least two classes",
         train.num_classes(), train.num_classes() == 1 ? "" : "es");
  // The test set too, before anything is trained: a model is compiled for one input size.
  if (test.count() > 0) {
    const SampleShape a = train.shape(), b = test.shape();
    if (a.height != b.height || a.width != b.width || a.channels != b.channels)
      fail("test set has {}x{}x{} images but the training set has {}x{}x{}: the model is compiled for one input "
           "size, so it cannot be tested on images of another; nothing was trained. Give a test set of {}x{}x{} "
           "images", b.height, b.width, b.channels, a.height, a.width, a.channels, a.height, a.width, a.channels);
    check_dataset(test, "test");
  }
  // A padded crop shifts the image by up to the pad: from the side on, a crop can hold padding only.
  if (const int side = std::min(train.shape().height, train.shape().width);
      opt_.augment.pad_crop > 0 && opt_.augment.pad_crop >= side)
    fail("the random crop's pad ({}, TrainOptions::augment.pad_crop, kiln train --crop-pad) is not smaller than the "
         "training images' side ({}): a crop shifted by {} or more pixels holds padding only, no pixel of the image; "
         "use a pad below {}, or 0 for no random crop", opt_.augment.pad_crop, side, side, side);
  const Program& p = exe_->program();
  const int batch = int(p.tensors[p.input].shape[0]);
  if (train.count() < batch)
    fail("training set has {} images, fewer than one batch of {}; use a smaller --batch", train.count(), batch);
  const std::vector<std::string> names = train.class_names();
  if (!class_names_.empty() && !names.empty() && names != class_names_)
    fail("the checkpoint '{}' was trained on other classes than the data's ({} in the checkpoint, {} in the data); "
         "resume on the same data, or start a new run with another checkpoint path", opt_.checkpoint,
         class_names_.size(), names.size());
  if (!names.empty()) class_names_ = names;
  if (epochs_done_ == 0 || norm_.mean.empty()) norm_ = train.channel_stats();
  std::unique_ptr<BatchStream> stream = training_batches(train, batch);
  BatchStream& loader = *stream;
  const int64_t steps = loader.batches_per_epoch();
  // A checkpoint of another rank count had other steps per epoch: the schedule and the optimizer's
  // step count continue from the epochs done.
  if (resumed_ && resumed_ranks_ != ranks()) global_step_ = int64_t(epochs_done_) * steps;
  // Data parallel: the ranks read their totals together (a collective) at the same steps, so the
  // reads are every `read_every` steps rather than by each rank's clock.
  const int64_t read_every = std::max<int64_t>(1, steps / 20);
  if (group_) group_->watchdog(opt_.rank_timeout);
  std::vector<EpochReport> reports;
  int started = -1;  // the epoch the loader is already building (started before the last evaluation)
  for (int epoch = epochs_done_; epoch < opt_.epochs; ++epoch) {
    const auto start = Clock::now();
    auto last_read = start;
    const int64_t first_step = global_step_;
    if (started != epoch) loader.start_epoch(epoch);
    reset_totals(p.train_totals);
    Batch b;
    std::vector<double> totals;
    int64_t seen = 0, i = 0;
    double waited = 0;  // seconds spent in loader.next() waiting for data
    double paced_before = loader.paced_seconds();
    // Reads the totals back (a wait for the steps queued so far) and stops at a non-finite loss.
    bool stop_agreed = false;  // a stop asked for on any rank, as of the last read
    auto read_and_check = [&] {
      totals = read_training_totals(stop_agreed);
      last_read = Clock::now();
      if (totals[kFirstBadStep] < 0) return;
      const int64_t bad = int64_t(totals[kFirstBadStep]);
      fail("training diverged: the loss of epoch {}/{}, step {}/{} (optimizer step {}) is {} at learning rate {}; "
           "training stopped without writing a checkpoint. {}. Lower the learning rate or add warm-up and start "
           "a new run", epoch + 1, opt_.epochs, bad - first_step + 1, steps, bad + 1, totals[kFirstBadLoss],
           opt_.schedule.at(bad, steps, opt_.epochs), last_good_checkpoint());
    };
    auto next_batch = [&] {
      const auto asked = Clock::now();
      const bool got = loader.next(b);
      const double paced = loader.paced_seconds();  // holding back to the GPU's pace is not waiting for data
      waited += seconds_since(asked) - (paced - paced_before);
      paced_before = paced;
      return got;
    };
    // A stop asked for is seen here, between steps: the one under way has been enqueued whole.
    bool stopping = false;
    // With several ranks, only at the reads, where every rank learns of it at the same step.
    auto stop_asked = [&] {
      stopping = (group_ ? stop_agreed : opt_.stop != nullptr && opt_.stop->load(std::memory_order_relaxed)) &&
                 i < steps;
      return stopping;
    };
    while (!stop_asked() && next_batch()) {
      enqueue_step(b, opt_.schedule.at(global_step_, steps, opt_.epochs));
      ++i;
      seen += b.size * ranks();  // every rank trains as many samples a step
      const bool read_now = group_ ? i % read_every == 0 : seconds_since(last_read) >= opt_.report_seconds;
      if (i == 1 || i == steps || read_now) {
        read_and_check();
        if (on_step) {
          const double elapsed = seconds_since(start);
          const double ips = double(seen) / std::max(elapsed, 1e-9);
          const double remaining = double((opt_.epochs - epoch) * steps - i) * batch / std::max(ips, 1e-9);
          on_step({epoch, i, steps, totals[kLossSum] / double(i), ips, remaining, waited / std::max(elapsed, 1e-9)});
        }
      }
    }
    if (stopping) {
      // Waits for the steps enqueued (a diverged one is reported as such) and keeps the checkpoint
      // of the last whole epoch: a partial epoch is never saved.
      if (i > 0) read_and_check();
      std::string where;
      if (opt_.checkpoint.empty()) where = "no checkpoint path was set, so nothing was saved";
      else if (saved_epochs_ > 0)
        where = fmt::format("checkpoint '{}' holds epoch {}: resume from it (TrainOptions::resume, kiln train "
                            "--resume) to continue", opt_.checkpoint, saved_epochs_);
      else where = fmt::format("no checkpoint was written to '{}'", opt_.checkpoint);
      throw Stopped(fmt::format("training was stopped at epoch {}/{}, step {}/{}; {}", epoch + 1, opt_.epochs, i,
                                steps, where),
                    epoch, opt_.epochs, i, steps, opt_.checkpoint, saved_epochs_);
    }
    if (totals.empty()) read_and_check();
    // The next epoch's first batches are built while this one is checked, evaluated and saved, so
    // its first steps do not wait for the loader to fill up.
    if (epoch + 1 < opt_.epochs) loader.start_epoch(started = epoch + 1);
    EpochReport r;
    r.epoch = epoch;
    r.train_loss = totals[kLossSum] / double(std::max<int64_t>(i, 1));
    r.train_accuracy = totals[kHitsSum] / double(std::max<int64_t>(seen, 1));
    r.train_top5_accuracy = totals[kTop5HitsSum] / double(std::max<int64_t>(seen, 1));
    r.seconds = seconds_since(start);
    r.images_per_second = double(seen) / std::max(r.seconds, 1e-9);
    r.data_wait_seconds = waited;
    r.lr = opt_.schedule.at(first_step, steps, opt_.epochs);
    if (p.loss_scale >= 0) r.loss_scale = exe_->read<float>(p.loss_scale)[0];
    r.decoder = loader.describe();
    // Each rank's BatchNorm running statistics come from its share of the batches: rank 0's are
    // kept (as DistributedDataParallel does), so every rank checks, evaluates and saves one state.
    exe_->broadcast_state_from_rank0(true);
    // A last update can leave non-finite values behind a finite loss.
    auto phase = Clock::now();
    std::vector<NamedTensor> tensors = state();
    if (const std::string bad = non_finite_text(tensors); !bad.empty())
      fail("training diverged: after epoch {}/{} (optimizer step {}) {}; training stopped without writing a "
           "checkpoint. {}. Lower the learning rate or add warm-up and start a new run", epoch + 1, opt_.epochs,
           global_step_, bad, last_good_checkpoint());
    r.check_seconds = seconds_since(phase);
    // Saved before the evaluation: a test file that cannot be decoded must not cost a trained epoch
    // (on ImageNet, hours); the evaluation changes nothing the checkpoint holds.
    epochs_done_ = epoch + 1;
    if (!opt_.checkpoint.empty()) {
      phase = Clock::now();
      if (writes_checkpoints()) save_state(opt_.checkpoint, epochs_done_, tensors);
      saved_epochs_ = epochs_done_;
      r.checkpoint_seconds = seconds_since(phase);
    }
    phase = Clock::now();
    try {
      const Accuracy tested = test.count() > 0 ? evaluate_accuracy(test) : Accuracy{};
      r.test_accuracy = tested.top1;
      r.test_top5_accuracy = tested.top5;
    } catch (const Stopped&) {
      throw;
    } catch (const Error& e) {
      r.eval_error = e.what();
    }
    r.eval_seconds = seconds_since(phase);
    if (group_) group_->progress();
    reports.push_back(r);
    if (on_epoch) on_epoch(r);  // the epoch's report (a --json line) is written before the run stops
    if (!r.eval_error.empty()) fail("{}", evaluation_failed_text(r, epoch));
  }
  return reports;
}

// The error of an epoch whose training finished and whose evaluation failed: what failed and what
// the run kept.
std::string Trainer::evaluation_failed_text(const EpochReport& r, int epoch) const {
  const std::string kept =
      opt_.checkpoint.empty()
          ? std::string("no checkpoint path was set, so the trained weights were not saved")
          : fmt::format("the epoch's training is kept: checkpoint '{}' holds epoch {}; once the test set is fixed "
                        "(or with --skip-bad, which leaves unreadable files out), resume with --resume",
                        opt_.checkpoint, saved_epochs_);
  return fmt::format("the evaluation on the test set after epoch {}/{} failed: {}. Training stopped; {}", epoch + 1,
                     opt_.epochs, r.eval_error, kept);
}

}  // namespace kiln

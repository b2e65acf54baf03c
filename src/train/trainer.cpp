#include "kiln/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/error.h"
#include "data/gpu_decode/gpu_decode_loader.h"
#include "data/transforms.h"
#include "ops/loss/totals_slots.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string join(const std::vector<float>& v) {
  std::string s;
  for (float x : v) {
    if (!s.empty()) s += ',';
    s += fmt::format("{:.9g}", x);
  }
  return s;
}

constexpr const char* kFormat = "kiln-checkpoint-2";        // with the recipe
constexpr const char* kLegacyFormat = "kiln-checkpoint-1";  // without: only the seed is compared
constexpr const char* kRecipePrefix = "recipe.";

const char* optimizer_name(OptimizerKind kind) { return kind == OptimizerKind::SGD ? "sgd" : "adamw"; }

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Cosine: return "cosine";
    case ScheduleKind::Step: return "step";
  }
  return "?";
}

// The optimizer whose state a checkpoint tensor is ("" for other tensors).
std::string optimizer_of_state(const std::string& tensor) {
  if (tensor == "optimizer.momentum_buffer") return "sgd";
  if (tensor == "optimizer.exp_avg" || tensor == "optimizer.exp_avg_sq") return "adamw";
  return "";
}

// Shortest text that reads back as the same float.
std::string number(float x) { return fmt::format("{}", x); }

// "" when every value is finite; else what the tensor holds, for a message.
std::string non_finite_text(const NamedTensor& t) {
  const NonFinite bad = find_non_finite(t);
  if (bad.count == 0) return "";
  return fmt::format("tensor '{}' holds {} non-finite value{} (the first, {}, at index {})", t.name, bad.count,
                     bad.count == 1 ? "" : "s", bad.first_value, bad.first);
}

std::string non_finite_text(const std::vector<NamedTensor>& tensors) {
  for (const NamedTensor& t : tensors)
    if (std::string bad = non_finite_text(t); !bad.empty()) return bad;
  return "";
}

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
  if (!(t.report_seconds >= 0) || !std::isfinite(t.report_seconds))
    fail("TrainOptions::report_seconds must be finite and >= 0 (0 reads the totals after every step), got {}",
         t.report_seconds);
  return t;
}

// The checkpoint's lock, taken before the rule on an existing file is applied: a file that
// another run is writing is reported as that (resume or overwrite would not help).
std::unique_ptr<CheckpointLock> lock_checkpoint(const TrainOptions& t) {
  if (t.checkpoint.empty()) return nullptr;
  auto lock = std::make_unique<CheckpointLock>(t.checkpoint);
  check_checkpoint_target(t);  // a throw here releases the lock
  return lock;
}

}  // namespace

void check_checkpoint_target(const TrainOptions& t) {
  if (t.checkpoint.empty() || t.resume || t.overwrite) return;
  std::error_code ec;
  if (!std::filesystem::exists(t.checkpoint, ec)) return;
  fail("checkpoint '{}' already exists: this new run would replace it after its first epoch. Continue that run with "
       "--resume (TrainOptions::resume), replace it with --overwrite (TrainOptions::overwrite), or give this run "
       "another checkpoint path; '{}' is left as it was", t.checkpoint, t.checkpoint);
}

Trainer::Trainer(const Blueprint& blueprint, const CompileOptions& options, TrainOptions train)
    : opt_(checked(std::move(train))),
      lock_(lock_checkpoint(opt_)),
      model_name_(blueprint.name()),
      exe_(std::make_unique<Executable>(compile(blueprint, options), opt_.seed)) {
  if (opt_.resume && std::filesystem::exists(opt_.checkpoint)) {
    saved_epochs_ = epochs_done_ = resumed_epochs_ = load_checkpoint(opt_.checkpoint);
    resumed_ = true;
  }
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
  GpuCropPlan probe;
  const bool gpu_possible = pixels_to_device() && gpu_decode_built() && train.plan_gpu_crop(0, opt_.seed, 0, probe);
  if (opt_.decode == DecodeDevice::Gpu || (opt_.decode == DecodeDevice::Auto && gpu_possible)) {
    if (!pixels_to_device())
      fail("--decode gpu needs a CUDA run with an fp32 input; use --device cuda, or --decode cpu");
    GpuDecodeSettings g;
    g.batch = batch, g.seed = opt_.seed, g.workers = opt_.workers;
    g.gpu_lead = opt_.decode == DecodeDevice::Gpu ? 2 : 1;
    g.device = exe_->program().options.device_index;
    return make_gpu_decode_loader(train, g);
  }
  auto loader = std::make_unique<BatchLoader>(train, batch, true, true, norm_.mean, norm_.std, opt_.seed, opt_.workers);
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
    auto read_and_check = [&] {
      totals = read_totals(p.train_totals);
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
    auto stop_asked = [&] {
      stopping = opt_.stop != nullptr && opt_.stop->load(std::memory_order_relaxed) && i < steps;
      return stopping;
    };
    while (!stop_asked() && next_batch()) {
      enqueue_step(b, opt_.schedule.at(global_step_, steps, opt_.epochs));
      ++i;
      seen += b.size;
      if (i == 1 || i == steps || seconds_since(last_read) >= opt_.report_seconds) {
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
    r.decoder = loader.describe();
    // A last update can leave non-finite values behind a finite loss.
    auto phase = Clock::now();
    std::vector<NamedTensor> tensors = state();
    if (const std::string bad = non_finite_text(tensors); !bad.empty())
      fail("training diverged: after epoch {}/{} (optimizer step {}) {}; training stopped without writing a "
           "checkpoint. {}. Lower the learning rate or add warm-up and start a new run", epoch + 1, opt_.epochs,
           global_step_, bad, last_good_checkpoint());
    r.check_seconds = seconds_since(phase);
    phase = Clock::now();
    const Accuracy tested = test.count() > 0 ? evaluate_accuracy(test) : Accuracy{};
    r.test_accuracy = tested.top1;
    r.test_top5_accuracy = tested.top5;
    r.eval_seconds = seconds_since(phase);
    epochs_done_ = epoch + 1;
    if (!opt_.checkpoint.empty()) {
      phase = Clock::now();
      save_state(opt_.checkpoint, epochs_done_, tensors);
      saved_epochs_ = epochs_done_;
      r.checkpoint_seconds = seconds_since(phase);
    }
    reports.push_back(r);
    if (on_epoch) on_epoch(r);
  }
  return reports;
}

std::vector<NamedTensor> Trainer::state() {
  const Program& p = exe_->program();
  std::vector<int> ids(p.params);
  ids.insert(ids.end(), p.buffers.begin(), p.buffers.end());
  ids.insert(ids.end(), p.opt_state_regions.begin(), p.opt_state_regions.end());
  std::vector<std::vector<std::byte>> reads;
  exe_->read_many(ids, reads);  // one wait on the GPU for all of them
  std::vector<NamedTensor> tensors;
  for (size_t i = 0; i < ids.size(); ++i) {
    const TensorSpec& t = p.tensors[ids[i]];
    tensors.push_back(NamedTensor{t.name, t.dtype, t.shape, std::move(reads[i])});
  }
  return tensors;
}

std::string Trainer::last_good_checkpoint() const {
  if (opt_.checkpoint.empty()) return "No checkpoint path was set, so no good state was kept";
  if (saved_epochs_ > 0)
    return fmt::format("The last good checkpoint is '{}' (after epoch {}), left as it was", opt_.checkpoint,
                       saved_epochs_);
  std::error_code ec;
  if (std::filesystem::exists(opt_.checkpoint, ec))
    return fmt::format("There is no good checkpoint of this run: it has not written '{}' yet (the file there, from "
                       "an earlier run, is left as it was)", opt_.checkpoint);
  return fmt::format("There is no good checkpoint: this run has not written '{}' yet", opt_.checkpoint);
}

std::vector<std::pair<std::string, std::string>> Trainer::recipe() const {
  const Program& p = exe_->program();
  const Shape& in = p.tensors[p.input].shape;
  const CompileOptions& c = p.options;
  const OptimizerConfig& o = c.optimizer;
  const LrSchedule& s = opt_.schedule;
  std::vector<std::pair<std::string, std::string>> r;
  auto add = [&](const char* key, std::string value) { r.emplace_back(key, std::move(value)); };
  add("model", model_name_);
  add("input", fmt::format("{}x{}x{}", in[1], in[2], in[3]));
  if (p.logits >= 0) add("classes", std::to_string(p.tensors[p.logits].shape[1]));
  add("batch", std::to_string(in[0]));
  add("precision", precision_name(c.precision));
  add("optimizer", optimizer_name(o.kind));
  if (o.kind == OptimizerKind::SGD) {
    add("momentum", number(o.momentum));
    add("nesterov", o.nesterov ? "true" : "false");
  } else {
    add("beta1", number(o.beta1));
    add("beta2", number(o.beta2));
    add("eps", number(o.eps));
  }
  add("weight_decay", number(o.weight_decay));
  add("schedule", schedule_name(s.kind));
  add("lr", number(s.lr));
  add("warmup", std::to_string(s.warmup_epochs));
  if (s.kind == ScheduleKind::Step) {
    add("step_epochs", std::to_string(s.step_epochs));
    add("gamma", number(s.gamma));
  }
  add("label_smoothing", number(c.label_smoothing));
  add("seed", std::to_string(opt_.seed));
  add("crop_pad", std::to_string(opt_.augment.pad_crop));
  add("hflip", opt_.augment.hflip ? "true" : "false");
  for (const auto& [key, value] : opt_.data_recipe) r.emplace_back(key, value);
  return r;
}

void Trainer::save_checkpoint(const std::string& path, int epochs_done) { save_state(path, epochs_done, state()); }

void Trainer::save_state(const std::string& path, int epochs_done, const std::vector<NamedTensor>& tensors) {
  if (const std::string bad = non_finite_text(tensors); !bad.empty())
    fail("refusing to write checkpoint '{}': {}; the model has diverged (lower the learning rate or add warm-up). "
         "An existing '{}' is left as it was", path, bad, path);
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"kiln_version", kVersion},
      {"epochs", std::to_string(opt_.epochs)},
      {"epochs_done", std::to_string(epochs_done)},
      {"global_step", std::to_string(global_step_)},
      {"seed", std::to_string(opt_.seed)},
      {"norm_mean", join(norm_.mean)},
      {"norm_std", join(norm_.std)}};
  if (!class_names_.empty()) meta["class_names"] = nlohmann::json(class_names_).dump();
  for (const auto& [key, value] : recipe()) meta[kRecipePrefix + key] = value;
  save_safetensors(path, tensors, meta);
}

void Trainer::check_recipe(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  const bool legacy = metadata.at("format") == kLegacyFormat;
  std::map<std::string, std::string> theirs;
  for (const auto& [key, value] : metadata)
    if (key.rfind(kRecipePrefix, 0) == 0) theirs[key.substr(std::strlen(kRecipePrefix))] = value;
  if (legacy) {  // written before the recipe was recorded: its seed is all there is to compare
    theirs.clear();
    if (auto seed = metadata.find("seed"); seed != metadata.end()) theirs["seed"] = seed->second;
  }
  const auto mine = recipe();
  std::map<std::string, std::string> mine_by_key(mine.begin(), mine.end());
  // Another optimizer or schedule has other settings; those are not differences of their own.
  auto differs = [&](const char* key) {
    auto a = theirs.find(key), b = mine_by_key.find(key);
    return a != theirs.end() && b != mine_by_key.end() && a->second != b->second;
  };
  const bool other_kinds = differs("optimizer") || differs("schedule");
  std::vector<std::string> differences;
  for (const auto& [key, value] : mine) {
    auto it = theirs.find(key);
    if (it == theirs.end()) {
      if (!legacy && !other_kinds)
        differences.push_back(fmt::format("{}: not recorded in the checkpoint, {} in this run", key, value));
    } else if (it->second != value) {
      differences.push_back(fmt::format("{}: {} in the checkpoint, {} in this run", key, it->second, value));
    }
  }
  for (const auto& [key, value] : theirs)
    if (!mine_by_key.count(key) && !other_kinds)
      differences.push_back(fmt::format("{}: {} in the checkpoint, not used in this run", key, value));
  if (differences.empty()) return;
  std::string list;
  for (const std::string& d : differences) list += "\n  " + d;
  fail("cannot resume from checkpoint '{}': it was written with a different recipe, so this run would not continue "
       "it:{}\nResume with the checkpoint's settings (only the epoch count may change), or start a new run with "
       "another checkpoint path", path, list);
}

int Trainer::load_checkpoint(const std::string& path) { return restore(path, false); }

void Trainer::load_weights(const std::string& path) { restore(path, true); }

int Trainer::restore(const std::string& path, bool weights_only) {
  const SafetensorsFile file = load_safetensors(path);
  const Program& p = exe_->program();
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || (format->second != kFormat && format->second != kLegacyFormat))
    fail("'{}' is not a kiln checkpoint: its metadata 'format' is '{}', kiln reads {} and {}; resume from a "
         "checkpoint that kiln wrote", path, format == file.metadata.end() ? "" : format->second, kFormat,
         kLegacyFormat);
  if (!weights_only) check_recipe(path, file.metadata);

  // Everything is checked before anything is restored: a refused checkpoint changes nothing.
  std::vector<std::pair<int, const NamedTensor*>> restores;
  auto check = [&](int id) {
    const TensorSpec& t = p.tensors[id];
    const NamedTensor* saved = file.find(t.name);
    if (!saved && t.role == TensorRole::OptState) {
      for (const NamedTensor& other : file.tensors) {
        const std::string theirs = optimizer_of_state(other.name);
        if (!theirs.empty() && theirs != optimizer_name(p.options.optimizer.kind))
          fail("checkpoint '{}' was written with the {} optimizer (it holds '{}') but this run uses {}, whose state "
               "'{}' it lacks; resume with --optimizer {}, or start a new run with another checkpoint path", path,
               theirs, other.name, optimizer_name(p.options.optimizer.kind), t.name, theirs);
      }
    }
    if (!saved) fail("checkpoint '{}' has no tensor '{}'; was it written for another model?", path, t.name);
    if (saved->shape != t.shape || saved->dtype != t.dtype)
      fail("checkpoint '{}': tensor '{}' is {} {} but the model needs {} {}", path, t.name, dtype_name(saved->dtype),
           shape_str(saved->shape), dtype_name(t.dtype), shape_str(t.shape));
    if (const std::string bad = non_finite_text(*saved); !bad.empty())
      fail("checkpoint '{}': {}; it was written by a run that had diverged. Resume from an earlier checkpoint or "
           "start a new run", path, bad);
    restores.emplace_back(id, saved);
  };
  for (int id : p.params) check(id);
  for (int id : p.buffers) check(id);
  if (!weights_only)
    for (int id : p.opt_state_regions) check(id);
  auto meta = [&](const std::string& key) {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end()) fail("checkpoint '{}' lacks metadata '{}'", path, key);
    return it->second;
  };
  auto floats = [&](const std::string& key) {
    const std::string s = meta(key);
    std::vector<float> v;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t next = s.find(',', pos);
      v.push_back(std::stof(s.substr(pos, next - pos)));
      if (!std::isfinite(v.back()))
        fail("checkpoint '{}': metadata '{}' holds a non-finite value ({}); start a new run", path, key, s);
      if (next == std::string::npos) break;
      pos = next + 1;
    }
    return v;
  };
  int64_t global_step = 0;
  int epochs_done = 0;
  ChannelStats norm;
  std::vector<std::string> class_names;
  if (auto names = file.metadata.find("class_names"); names != file.metadata.end()) {
    const nlohmann::json parsed = nlohmann::json::parse(names->second, nullptr, false);
    if (!parsed.is_array()) fail("checkpoint '{}' has malformed metadata 'class_names'", path);
    for (const auto& name : parsed) {
      if (!name.is_string()) fail("checkpoint '{}' has malformed metadata 'class_names'", path);
      class_names.push_back(name.get<std::string>());
    }
  }
  try {
    global_step = std::stoll(meta("global_step"));
    norm.mean = floats("norm_mean");
    norm.std = floats("norm_std");
    epochs_done = std::stoi(meta("epochs_done"));
  } catch (const std::logic_error&) {
    fail("checkpoint '{}' has malformed metadata", path);
  }
  for (const auto& [id, saved] : restores) exe_->write(id, saved->data.data(), saved->data.size());
  norm_ = std::move(norm);
  class_names_ = std::move(class_names);
  if (weights_only) return epochs_done;
  global_step_ = global_step;
  epochs_done_ = epochs_done;
  return epochs_done_;
}

}  // namespace kiln

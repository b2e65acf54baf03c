#include "kiln/trainer.h"

#include <chrono>
#include <cstring>
#include <filesystem>

#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/error.h"

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

}  // namespace

Trainer::Trainer(const Blueprint& blueprint, const CompileOptions& options, TrainOptions train)
    : exe_(std::make_unique<Executable>(compile(blueprint, options), train.seed)), opt_(std::move(train)) {
  if (opt_.epochs <= 0) fail("epochs must be positive, got {}", opt_.epochs);
  if (!(opt_.schedule.lr > 0)) fail("learning rate must be positive, got {}", opt_.schedule.lr);
  if (opt_.resume && !opt_.checkpoint.empty() && std::filesystem::exists(opt_.checkpoint))
    epochs_done_ = load_checkpoint(opt_.checkpoint);
}

Trainer::~Trainer() = default;

void Trainer::check_dataset(const Dataset& data, const char* which) const {
  const Shape& in = exe_->program().tensors[exe_->program().input].shape;
  if (data.count <= 0) fail("{} set is empty", which);
  if (data.height != in[1] || data.width != in[2] || data.channels != in[3])
    fail("{} set has {}x{}x{} images but the model expects {}x{}x{}; pick a model for this data", which,
         data.height, data.width, data.channels, in[1], in[2], in[3]);
  const int64_t classes = exe_->program().tensors[exe_->program().logits].shape[1];
  if (data.num_classes > classes)
    fail("{} set has {} classes but the model outputs {}", which, data.num_classes, classes);
}

void Trainer::copy_in(const Batch& batch) {
  const Program& p = exe_->program();
  const TensorSpec& input = p.tensors[p.input];
  if (int64_t(batch.images.size()) != numel(input.shape))
    fail("batch holds {} values but the program's input needs {}", batch.images.size(), numel(input.shape));
  if (input.dtype == DType::F64) {
    std::vector<double> wide(batch.images.begin(), batch.images.end());
    exe_->write(p.input, wide.data(), wide.size() * sizeof(double));
  } else if (input.dtype == DType::F32) {
    exe_->write(p.input, batch.images.data(), batch.images.size() * sizeof(float));
  } else {
    fail("the trainer feeds fp32 batches; input dtype {} needs a cast op (not built yet)", dtype_name(input.dtype));
  }
  exe_->write(p.label, batch.labels.data(), batch.labels.size() * sizeof(int32_t));
}

int64_t Trainer::correct_in(int count_id) {
  if (count_id < 0) fail("this program counts no correct predictions; compile it with a loss");
  return exe_->read<int32_t>(count_id)[0];
}

double Trainer::step(const Batch& batch, float lr) {
  copy_in(batch);
  StepScalars s{lr, global_step_, opt_.seed};
  exe_->run_forward(s);
  exe_->run_backward(s);
  exe_->run_update(s);
  ++global_step_;
  const int loss = exe_->program().loss;
  return exe_->program().tensors[loss].dtype == DType::F64 ? exe_->read<double>(loss)[0] : exe_->read<float>(loss)[0];
}

double Trainer::evaluate(const Dataset& data) {
  check_dataset(data, "evaluation");
  const Program& p = exe_->program();
  const int batch = int(p.tensors[p.input].shape[0]);
  BatchLoader loader(data, batch, false, false, {}, norm_.mean, norm_.std, opt_.seed, opt_.workers);
  loader.start_epoch(0);
  Batch b;
  int64_t correct = 0;
  while (loader.next(b)) {
    // The padding rows of a last partial batch are labelled -1, which COUNT_CORRECT never counts.
    for (int64_t i = b.size; i < int64_t(b.labels.size()); ++i) b.labels[i] = -1;
    copy_in(b);
    exe_->run_inference({0.f, global_step_, opt_.seed});
    correct += correct_in(p.inference_correct);
  }
  return double(correct) / double(data.count);
}

std::vector<EpochReport> Trainer::fit(const Dataset& train, const Dataset& test,
                                      const std::function<void(const StepReport&)>& on_step,
                                      const std::function<void(const EpochReport&)>& on_epoch) {
  check_dataset(train, "training");
  const Program& p = exe_->program();
  const int batch = int(p.tensors[p.input].shape[0]);
  if (train.count < batch)
    fail("training set has {} images, fewer than one batch of {}; use a smaller --batch", train.count, batch);
  if (epochs_done_ == 0 || norm_.mean.empty()) norm_ = compute_channel_stats(train);
  BatchLoader loader(train, batch, true, true, opt_.augment, norm_.mean, norm_.std, opt_.seed, opt_.workers);
  const int64_t steps = loader.batches_per_epoch();
  std::vector<EpochReport> reports;
  for (int epoch = epochs_done_; epoch < opt_.epochs; ++epoch) {
    const auto start = Clock::now();
    loader.start_epoch(epoch);
    Batch b;
    double loss_sum = 0;
    int64_t correct = 0, seen = 0, i = 0;
    while (loader.next(b)) {
      const float lr = opt_.schedule.at(global_step_, steps, opt_.epochs);
      loss_sum += step(b, lr);
      correct += correct_in(p.train_correct);
      seen += b.size;
      ++i;
      if (on_step) {
        const double elapsed = seconds_since(start);
        const double ips = double(seen) / std::max(elapsed, 1e-9);
        const double remaining = double((opt_.epochs - epoch) * steps - i) * batch / std::max(ips, 1e-9);
        on_step({epoch, i, steps, loss_sum / double(i), ips, remaining});
      }
    }
    EpochReport r;
    r.epoch = epoch;
    r.train_loss = loss_sum / double(std::max<int64_t>(i, 1));
    r.train_accuracy = double(correct) / double(std::max<int64_t>(seen, 1));
    r.seconds = seconds_since(start);
    r.images_per_second = double(seen) / std::max(r.seconds, 1e-9);
    r.test_accuracy = test.count > 0 ? evaluate(test) : 0.0;
    epochs_done_ = epoch + 1;
    if (!opt_.checkpoint.empty()) save_checkpoint(opt_.checkpoint, epochs_done_);
    reports.push_back(r);
    if (on_epoch) on_epoch(r);
  }
  return reports;
}

void Trainer::save_checkpoint(const std::string& path, int epochs_done) {
  const Program& p = exe_->program();
  std::vector<NamedTensor> tensors;
  auto add = [&](int id) {
    const TensorSpec& t = p.tensors[id];
    NamedTensor n{t.name, t.dtype, t.shape, std::vector<std::byte>(t.bytes())};
    exe_->read(id, n.data.data(), n.data.size());
    tensors.push_back(std::move(n));
  };
  for (int id : p.params) add(id);
  for (int id : p.buffers) add(id);
  for (int id : p.opt_state_regions) add(id);
  std::map<std::string, std::string> meta = {
      {"format", "kiln-checkpoint-1"},          {"epochs_done", std::to_string(epochs_done)},
      {"global_step", std::to_string(global_step_)}, {"seed", std::to_string(opt_.seed)},
      {"norm_mean", join(norm_.mean)},          {"norm_std", join(norm_.std)}};
  save_safetensors(path, tensors, meta);
}

int Trainer::load_checkpoint(const std::string& path) {
  const SafetensorsFile file = load_safetensors(path);
  const Program& p = exe_->program();
  auto restore = [&](int id) {
    const TensorSpec& t = p.tensors[id];
    const NamedTensor* saved = file.find(t.name);
    if (!saved) fail("checkpoint '{}' has no tensor '{}'; was it written for another model?", path, t.name);
    if (saved->shape != t.shape || saved->dtype != t.dtype)
      fail("checkpoint '{}': tensor '{}' is {} {} but the model needs {} {}", path, t.name, dtype_name(saved->dtype),
           shape_str(saved->shape), dtype_name(t.dtype), shape_str(t.shape));
    exe_->write(id, saved->data.data(), saved->data.size());
  };
  for (int id : p.params) restore(id);
  for (int id : p.buffers) restore(id);
  for (int id : p.opt_state_regions) restore(id);
  auto meta = [&](const std::string& key) {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end()) fail("checkpoint '{}' lacks metadata '{}'", path, key);
    return it->second;
  };
  auto floats = [](const std::string& s) {
    std::vector<float> v;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t next = s.find(',', pos);
      v.push_back(std::stof(s.substr(pos, next - pos)));
      if (next == std::string::npos) break;
      pos = next + 1;
    }
    return v;
  };
  try {
    global_step_ = std::stoll(meta("global_step"));
    norm_.mean = floats(meta("norm_mean"));
    norm_.std = floats(meta("norm_std"));
    epochs_done_ = std::stoi(meta("epochs_done"));
  } catch (const std::logic_error&) {
    fail("checkpoint '{}' has malformed metadata", path);
  }
  return epochs_done_;
}

}  // namespace kiln

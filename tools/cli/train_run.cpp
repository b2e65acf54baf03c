#include "cli/train_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/class_count_checks.h"
#include "cli/data_recipe.h"
#include "cli/model_file_data.h"
#include "cli/model_source.h"
#include "cli/stop_signals.h"
#include "cli/train_events.h"
#include "cli/train_data_checks.h"
#include "formats/tensorboard/tensorboard_writer.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"
#include "kiln/schedule.h"
#include "kiln/threads.h"
#include "kiln/torch_weights.h"
#include "kiln/trainer.h"
#include "kiln/onnx_import.h"

namespace kiln::cli {
namespace {

std::string clock_text(double seconds) {
  const int s = int(seconds + 0.5);
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

// --init-from: what of the file was not loaded. BN's counters are counted, not named: a PyTorch
// state_dict has one per BatchNorm (53 in ResNet-50's).
std::string left_out_text(const TorchWeightsLoaded& loaded) {
  std::vector<std::string> parts;
  if (const size_t n = loaded.bn_counters.size(); n > 0)
    parts.push_back(fmt::format("{} BatchNorm num_batches_tracked counter{} (kiln's BN momentum is fixed)", n,
                                n == 1 ? "" : "s"));
  parts.insert(parts.end(), loaded.left_out.begin(), loaded.left_out.end());
  return parts.empty() ? "" : fmt::format("; left out: {}", fmt::join(parts, ", "));
}

// --skip-bad: the files left out, each with why, after the run.
void print_skipped(const SampleSource& train, const SampleSource& test) {
  std::vector<std::string> bad = train.skipped();
  for (std::string& b : test.skipped()) bad.push_back(std::move(b));
  if (bad.empty()) return;
  fmt::print("skipped {} unreadable sample{} (--skip-bad):\n", bad.size(), bad.size() == 1 ? "" : "s");
  for (const std::string& b : bad) fmt::print("  {}\n", b);
}

// The line after a clean stop; returns the exit code, 128 + the signal (130 SIGINT, 143 SIGTERM).
int report_stop(const Stopped& s, bool live) {
  const int sig = stop_signal();
  const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
  const std::string kept = s.checkpoint_epochs > 0
                               ? fmt::format("{} holds epoch {} (resume with --resume)", s.checkpoint,
                                             s.checkpoint_epochs)
                               : std::string("no checkpoint was written");
  fmt::print("{}kiln: stopped by {} at epoch {}/{}, step {}/{}; {}\n", live ? "\n" : "", name, s.epoch + 1, s.epochs,
             s.step, s.steps_per_epoch, kept);
  std::fflush(stdout);
  return 128 + (sig == SIGTERM ? SIGTERM : SIGINT);
}

// What the run does with its checkpoint, once the Trainer has resumed it or not.
void print_checkpoint_start(const TrainArgs& a, const Trainer& trainer, bool replacing) {
  if (a.checkpoint.empty()) return;
  if (trainer.resumed()) {
    const int done = trainer.resumed_epochs();
    fmt::print("kiln: resumed from {}: epoch {} of {} done{}\n", a.checkpoint, done, a.train.epochs,
               done >= a.train.epochs ? "; nothing left to train (raise --epochs to train on)" : "");
  } else if (a.resume) {
    fmt::print("kiln: no checkpoint at {} yet: starting fresh\n", a.checkpoint);
  } else if (replacing) {
    fmt::print("kiln: starting fresh; checkpoints go to {}, replacing the earlier run's there after the first epoch "
               "(--overwrite)\n", a.checkpoint);
  } else {
    fmt::print("kiln: starting fresh; checkpoints go to {}\n", a.checkpoint);
  }
}

// --model FILE.onnx: the file's weights are where a fresh run starts, unless --no-weights (kiln's
// initialization) or --init-from (whose weights replace them) says otherwise.
void load_model_file_weights(const TrainArgs& a, const ModelSource& source, Trainer& trainer) {
  if (a.no_weights) {
    fmt::print("kiln: --no-weights: {} starts from kiln's initialization, not the file's weights\n", source.name);
    return;
  }
  if (!a.init_from.empty()) {
    fmt::print("kiln: --init-from {}: its weights replace those of {}\n", a.init_from, source.name);
    return;
  }
  TorchWeightsOptions w;
  w.new_head = source.new_head || a.new_head;  // a head for other classes, or --new-head for other names
  const TorchWeightsLoaded loaded = load_imported_weights(trainer.executable(), *source.imported, w);
  const char* head = source.new_head ? " (the new head starts from kiln's initialization)"
                     : a.new_head    ? " (--new-head: the last linear layer starts from kiln's initialization)"
                                     : "";
  fmt::print("kiln: initialized from the weights of {}: {} tensors{}{}\n", source.name, loaded.tensors, head,
             left_out_text(loaded));
}

// A run whose mean training loss in an epoch exceeds this many times the loss of a uniform guess
// (ln classes, where an untrained model starts) has blown up: the learning rate is too high.
// A model that blew up ends at chance level even when its loss comes back down, so the run stops
// before that epoch's checkpoint replaces a good one.
constexpr double kBlownUpLoss = 10;

}  // namespace

int run_train(const CommonOptions& o, const TrainArgs& a) {
  {  // an existing checkpoint without --resume or --overwrite is refused before anything is read
    TrainOptions target;
    target.checkpoint = a.checkpoint, target.resume = a.resume, target.overwrite = a.overwrite;
    check_checkpoint_target(target);  // the Trainer applies the same rule
  }
  std::ofstream json = json_appender(a.json);  // a bad path fails before anything is loaded
  if (!a.tensorboard.empty()) TensorBoardWriter::check_folder(a.tensorboard);  // so does a file as the folder
  // Sized now rather than when the program is made (CompileOptions::cpu, set below to the same
  // count): opening an image folder scans it on the pool.
  set_threads(a.backend.cpu.threads);
  const DataSplits data = open_dataset(a.data.data, data_options(a.data));
  const DataArgs data_args = resolved_data_args(a.data, data);  // --transform auto as chosen
  const SampleSource& train = *data.train;
  const SampleSource& test = *data.test;
  const SampleShape shape = train.shape();
  const bool image_files = reads_image_files(data.format);
  const int classes = o.classes > 0 ? o.classes : train.num_classes();
  // A model file is imported for the data's images and classes: a head for other classes is new.
  const ModelSource source = resolve_model(o.model, classes, shape.height, shape.width);
  if (a.no_weights && !source.is_file())
    fail("--no-weights starts a model file's architecture from kiln's initialization, but --model {} is a zoo model, "
         "which starts there anyway; drop --no-weights, or give --model FILE.onnx", o.model);
  check_data_fits(o, a, data, source.blueprint);
  check_class_count(a, data);
  // What the file says of the data its weights were trained on: its normalization and class names.
  const std::optional<Shape>& model_input = source.blueprint.input_hwc();
  const int model_channels = model_input ? int((*model_input)[2]) : shape.channels;
  const FileDataUse file_data = file_data_use(source, a, train, a.data.data, classes, model_channels);
  const std::unique_ptr<SampleSource> file_train = with_file_data(train, file_data);
  CompileOptions c = compile_options(o);
  c.input_hwc = {shape.height, shape.width, shape.channels};
  c.optimizer = optimizer_config(a.optimizer);
  c.cpu = a.backend.cpu;
  c.cuda = a.backend.cuda;
  // A rank of a data-parallel launch (--gpus) joins the others; only rank 0 writes the run's files.
  const std::shared_ptr<ProcessGroup> group = join_ranks_if_launched(a.parallel, c);
  const bool speaks = !group || group->rank() == 0;
  if (!speaks) json.close();
  TrainOptions t = a.train;  // the epochs, the schedule and the seed
  t.checkpoint = a.checkpoint, t.resume = a.resume, t.overwrite = a.overwrite;
  t.workers = loader_workers(a.data, data.format);
  t.decode = parse_decode_device(a.data.decode);
  const DataOptions data_opt = data_options(data_args);
  t.augment = image_files ? data_opt.transform.augment : data_opt.augment;
  t.data_recipe = data_recipe(data_args, data.format);
  for (auto& entry : model_recipe(source)) t.data_recipe.push_back(std::move(entry));  // a model file's path and hash
  // The data settings' differences named with their flags, before the program is compiled.
  if (a.resume) check_data_recipe_resumes(a.checkpoint, data_args, data.format);
  if (a.resume) check_model_resumes(a.checkpoint, source);
  t.stop = stop_requested();  // set by StopSignals' handler
  t.rank_timeout = a.parallel.rank_timeout;

  const Blueprint& model = source.blueprint;
  Trainer trainer(model, c, t);
  std::error_code exists_error;
  const bool replacing = a.overwrite && std::filesystem::exists(a.checkpoint, exists_error);
  fmt::print("kiln: training {} on {} ({}: {} train / {} test images, {}x{}x{}, {} classes), {} {} {}, batch {}, "
             "{} epochs, {} loader threads\n",
             o.model, a.data.data, data.format, train.count(), test.count(), shape.height, shape.width,
             shape.channels, train.num_classes(),
             group ? fmt::format("{} GPUs (data parallel, rank 0 on cuda:{})", group->ranks(), c.device_index)
                   : device_label(c),
             precision_name(o.compile.precision), a.optimizer.name, group ? fmt::format("{} per GPU", o.compile.batch) : std::to_string(o.compile.batch),
             a.train.epochs, t.workers);
  print_model_notes(source);
  print_checkpoint_start(a, trainer, replacing);
  if (trainer.resumed() && trainer.resumed_ranks() != trainer.ranks())
    fmt::print("kiln: the checkpoint was trained on {} rank{} and this run has {}: the global batch goes from {} to {}, "
               "and the schedule continues from epoch {}\n", trainer.resumed_ranks(),
               trainer.resumed_ranks() == 1 ? "" : "s", trainer.ranks(), o.compile.batch * trainer.resumed_ranks(),
               o.compile.batch * trainer.ranks(), trainer.resumed_epochs() + 1);
  if (source.is_file() && !trainer.resumed()) load_model_file_weights(a, source, trainer);
  // A resumed run normalizes and names its classes as its checkpoint says; the file did that at its start.
  if (!trainer.resumed() && speaks)
    for (const std::string& note : file_data.notes) fmt::print("kiln: {}: {}\n", source.name, note);
  if (!a.init_from.empty()) {
    if (trainer.resumed()) {
      fmt::print("kiln: --init-from {} not used: the run continues from its checkpoint\n", a.init_from);
    } else {
      TorchWeightsOptions w;
      w.new_head = a.new_head;
      const TorchWeightsLoaded loaded = trainer.load_torch_weights(a.init_from, w);
      // A kiln checkpoint gives its weights only: this run's optimizer state and epochs start afresh.
      const std::string kind = loaded.kiln_checkpoint.empty()
                                   ? std::string()
                                   : fmt::format(", {} (its weights only: the optimizer state and epochs start afresh)",
                                                 loaded.kiln_checkpoint);
      fmt::print("kiln: initialized from {}{}: {} tensors{}\n", a.init_from, kind, loaded.tensors,
                 left_out_text(loaded));
    }
  }
  const bool tested = test.count() > 0;  // else no accuracy is measured, and none is printed
  if (!tested)
    fmt::print("kiln: no test set: {}, so no test accuracy will be measured\n", no_test_set_reason(a, data.format));
  warn_batch_of_one(o, a, model, c);
  if (const auto removed = trainer.removed_temp_files(); !removed.empty())
    fmt::print("kiln: removed {} temporary file{} of a checkpoint write that was interrupted: {}\n", removed.size(),
               removed.size() == 1 ? "" : "s", fmt::join(removed, ", "));
  // Made once the run is set up, so that a run refused earlier leaves no event file behind.
  TrainEvents events(speaks ? a.tensorboard : std::string());
  if (!events.path().empty()) fmt::print("kiln: TensorBoard events go to {}\n", events.path());
  auto last_print = std::chrono::steady_clock::now();
  // The live line rewrites itself with carriage returns: only on a terminal. Into a file or a
  // pipe (a log, CI) each epoch is one plain line and nothing else.
  const bool live = isatty(fileno(stdout)) != 0;
  int saved_epochs = trainer.resumed_epochs();  // what --checkpoint holds of this run
  auto on_step = [&](const StepReport& s) {
    // A blown-up run stops before this epoch's checkpoint is written (kBlownUpLoss).
    const double uniform_loss = std::log(double(classes));
    if (classes >= 2 && s.loss > kBlownUpLoss * uniform_loss) {
      std::error_code ec;
      const std::string kept =
          a.checkpoint.empty()        ? std::string("no checkpoint path was set")
          : saved_epochs > 0          ? fmt::format("{} holds epoch {}, left as it was", a.checkpoint, saved_epochs)
          : std::filesystem::exists(a.checkpoint, ec)
              ? fmt::format("{}, an earlier run's, is left as it was", a.checkpoint)
              : fmt::format("no checkpoint was written to {}", a.checkpoint);
      fail("training diverged: the mean training loss of epoch {}/{} is {:.4g} after {} of its {} steps, more "
           "than {} times the {:.2f} (ln {}) of a model that gives every class the same probability: the "
           "updates have blown the model up, and such a run ends at chance level. Training stopped without "
           "writing this epoch's checkpoint ({}). Lower the learning rate (--lr {} now) or add --warmup, and "
           "start a new run",
           s.epoch + 1, a.train.epochs, s.loss, s.step_in_epoch, s.steps_per_epoch, kBlownUpLoss, uniform_loss, classes,
           kept, a.train.schedule.lr);
    }
    events.on_step(s);
    if (!live) return;
    const auto now = std::chrono::steady_clock::now();
    if (s.step_in_epoch != s.steps_per_epoch && now - last_print < std::chrono::milliseconds(500)) return;
    last_print = now;
    fmt::print("\repoch {}/{}  step {}/{}  loss {:.4f}  {:.0f} img/s  data wait {:.0f}%  ETA {}   ", s.epoch + 1,
               a.train.epochs, s.step_in_epoch, s.steps_per_epoch, s.loss, s.images_per_second, 100 * s.data_wait_share,
               clock_text(s.eta_seconds));
    std::fflush(stdout);
  };
  // Wall time per epoch as a user waits for it: training, the state check, evaluation and the
  // checkpoint (EpochReport::seconds counts the training steps alone).
  auto epoch_start = std::chrono::steady_clock::now();
  auto on_epoch = [&](const EpochReport& r) {
    const auto now = std::chrono::steady_clock::now();
    const double wall = std::chrono::duration<double>(now - epoch_start).count();
    epoch_start = now;
    if (!a.checkpoint.empty()) saved_epochs = r.epoch + 1;
    // No test set: null in the JSON line and nothing on the epoch's line, never a 0 that reads as
    // an accuracy.
    // A failed evaluation (EpochReport::eval_error) likewise: null, with the error beside it.
    const bool measured = tested && r.eval_error.empty();
    const nlohmann::json test_top1 = measured ? nlohmann::json(r.test_accuracy) : nlohmann::json(nullptr);
    const nlohmann::json test_top5 = measured ? nlohmann::json(r.test_top5_accuracy) : nlohmann::json(nullptr);
    if (json.is_open()) {
      json << nlohmann::json{{"framework", "kiln"}, {"model", o.model}, {"data", a.data.data},
                             {"format", data.format}, {"workers", t.workers}, {"decode", a.data.decode}, {"device", device_label(c)},
                             {"precision", precision_name(o.compile.precision)}, {"batch", o.compile.batch}, {"epoch", r.epoch + 1},
                             {"epochs", a.train.epochs}, {"wall_seconds", wall}, {"train_seconds", r.seconds},
                             {"check_seconds", r.check_seconds}, {"eval_seconds", r.eval_seconds},
                             {"checkpoint_seconds", r.checkpoint_seconds},
                             {"data_wait_seconds", r.data_wait_seconds}, {"decoder", r.decoder},
                             {"train_loss", r.train_loss}, {"train_accuracy", r.train_accuracy},
                             {"test_accuracy", test_top1}, {"train_top5_accuracy", r.train_top5_accuracy},
                             {"test_top5_accuracy", test_top5}, {"images_per_second", r.images_per_second},
                             {"lr", r.lr},
                             {"loss_scale", r.loss_scale > 0 ? nlohmann::json(r.loss_scale) : nlohmann::json(nullptr)},
                             {"eval_error", r.eval_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.eval_error)}}
                  .dump()
           << std::endl;
    }
    events.on_epoch(r, measured);
    const std::string top5 = classes > 5 ? fmt::format(" (top-5 {:.4f})", r.test_top5_accuracy) : std::string();
    const std::string test_acc = measured ? fmt::format("  test acc {:.4f}{}", r.test_accuracy, top5)
                                 : tested ? std::string("  test acc: evaluation failed")
                                          : std::string();
    fmt::print("{}epoch {}/{}  loss {:.4f}  train acc {:.4f}{}  {:.1f}s  {:.0f} img/s  data wait {:.0f}%\n",
               live ? "\r" : "", r.epoch + 1, a.train.epochs, r.train_loss, r.train_accuracy, test_acc, r.seconds,
               r.images_per_second, 100 * r.data_wait_seconds / std::max(r.seconds, 1e-9));
  };
  std::vector<EpochReport> reports;
  try {
    StopSignals stop_signals;  // only while training
    reports = trainer.fit(file_train ? *file_train : train, test, on_step, on_epoch);
  } catch (const Stopped& stopped) {
    if (group) group->leave();  // every rank stopped at the same step
    return report_stop(stopped, live);  // the Trainer, and the checkpoint's lock, go as it returns
  }
  if (group) group->leave();
  if (!reports.empty()) fmt::print("final loss: {:.6f}\n", reports.back().train_loss);
  if (!reports.empty() && !reports.back().decoder.empty()) fmt::print("decoded by {}\n", reports.back().decoder);
  warn_at_chance(reports, train);
  print_skipped(train, test);
  if (!tested) {
    fmt::print("no test set: test accuracy not measured ({})\n", no_test_set_reason(a, data.format));
    return 0;
  }
  Trainer::Accuracy accuracy{reports.empty() ? 0 : reports.back().test_accuracy,
                             reports.empty() ? 0 : reports.back().test_top5_accuracy};
  if (reports.empty()) accuracy = trainer.evaluate_accuracy(test);
  if (classes > 5) fmt::print("test top-5 accuracy: {:.4f}\n", accuracy.top5);
  fmt::print("test accuracy: {:.4f}\n", accuracy.top1);
  return 0;
}

}  // namespace kiln::cli

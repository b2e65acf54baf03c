// The kiln command line: `kiln train` and `kiln plan`.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/trainer.h"
#include "kiln/zoo.h"

namespace {

struct CommonOptions {
  std::string model = "digits_cnn";
  int batch = 64;
  std::string device = "cpu", precision = "fp32";
  bool no_fuse = false;
  int classes = -1;
};

void add_common(CLI::App* app, CommonOptions& o) {
  app->add_option("--model,-m", o.model, "model zoo name (" + fmt::format("{}", fmt::join(kiln::zoo::names(), ", ")) + ")");
  app->add_option("--batch,-b", o.batch, "batch size");
  app->add_option("--device", o.device, "cpu, cuda or cuda:N");
  app->add_option("--precision", o.precision, "fp32 (cpu, cuda), fp16 or bf16 (cuda)");
  app->add_flag("--no-fuse", o.no_fuse, "keep Conv, BN and ReLU as separate layers");
  app->add_option("--classes", o.classes, "number of classes (default: the model's, or the dataset's)");
}

kiln::CompileOptions compile_options(const CommonOptions& o) {
  kiln::CompileOptions c;
  c.batch = o.batch;
  const kiln::DeviceSpec spec = kiln::parse_device_spec(o.device);
  c.device = spec.device, c.device_index = spec.index;
  c.precision = kiln::parse_precision(o.precision);
  c.fuse_cbr = !o.no_fuse;
  return c;
}

std::string clock_text(double seconds) {
  const int s = int(seconds + 0.5);
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

int run_plan(const CommonOptions& o) {
  const kiln::Program program = kiln::compile(kiln::zoo::by_name(o.model, o.classes), compile_options(o));
  const kiln::MemoryPlan plan = kiln::plan_memory(program);
  kiln::verify_memory_plan(program, plan);
  fmt::print("{}", kiln::format_plan(program, plan));
  return 0;
}

struct TrainArgs {
  std::string data = "data/digits", format = "idx", optimizer = "sgd", schedule = "cosine";
  std::string checkpoint;
  int epochs = 10, warmup = 0, step_epochs = 30, workers = 2, crop_pad = 0;
  float lr = 0.05f, momentum = 0.9f, weight_decay = 5e-4f, label_smoothing = 0.f, gamma = 0.1f;
  bool nesterov = false, resume = false, hflip = false;
  uint64_t seed = 1;
  kiln::CudaOptions cuda;  // --no-cudnn-tune ... --pipeline-chunks (add_cuda)
  int side_stream = 1;     // --side-stream 0|1, into cuda.side_stream
};

// The CUDA backend's settings (CompileOptions::cuda); the KILN_* environment variables override
// them (README.md, GPU). Ranges are checked here, so a bad value is an error naming the flag.
void add_cuda(CLI::App* app, TrainArgs& a) {
  const std::string group = "CUDA backend (--device cuda; KILN_* variables override these)";
  CLI::Option* no_tune = app->add_flag_callback(
      "--no-cudnn-tune", [&a] { a.cuda.tune = false; },
      "keep cuDNN's first usable plan (or the plan cache's) instead of timing the plans [KILN_CUDNN_TUNE=0]");
  no_tune->group(group);
  app->add_option("--tune-plans", a.cuda.tune_plans,
                  "time only the first N cuDNN plans that build; 0: every plan [KILN_CUDNN_TUNE_PLANS]")
      ->check(CLI::Range(0, 9999))
      ->excludes(no_tune)
      ->type_name("N")
      ->group(group);
  app->add_option("--plan-cache", a.cuda.plan_cache,
                  "file of tuned plan choices: later runs on the same GPU and cuDNN rebuild them without tuning "
                  "[KILN_PLAN_CACHE]")
      ->type_name("FILE")
      ->group(group);
  app->add_option("--tune-log", a.cuda.tune_log, "append what tuning found, one JSON line per graph [KILN_TUNE_LOG]")
      ->type_name("FILE")
      ->group(group);
  app->add_option("--side-stream", a.side_stream,
                  "1: run wgrad beside dgrad on a second stream (default); 0: after it [KILN_SIDE_STREAM]")
      ->check(CLI::Range(0, 1))
      ->type_name("0|1")
      ->group(group);
  app->add_option("--pipeline-chunks", a.cuda.pipeline_chunks,
                  "batch slices the CBR backward pipelines its data gradient over; 1: off (default) "
                  "[KILN_PIPELINE_CHUNKS]")
      ->check(CLI::Range(1, 99))
      ->type_name("N")
      ->group(group);
}

int run_train(const CommonOptions& o, const TrainArgs& a) {
  const kiln::Dataset train = kiln::load_dataset(a.data, a.format, true);
  const kiln::Dataset test = kiln::load_dataset(a.data, a.format, false);
  kiln::CompileOptions c = compile_options(o);
  c.input_hwc = {train.height, train.width, train.channels};
  c.label_smoothing = a.label_smoothing;
  c.optimizer.kind = kiln::parse_optimizer(a.optimizer);
  c.optimizer.momentum = a.momentum;
  c.optimizer.nesterov = a.nesterov;
  c.optimizer.weight_decay = a.weight_decay;
  c.cuda = a.cuda;
  c.cuda.side_stream = a.side_stream == 1;
  kiln::TrainOptions t;
  t.epochs = a.epochs;
  t.schedule.kind = kiln::parse_schedule(a.schedule);
  t.schedule.lr = a.lr, t.schedule.warmup_epochs = a.warmup, t.schedule.step_epochs = a.step_epochs;
  t.schedule.gamma = a.gamma;
  t.seed = a.seed, t.workers = a.workers, t.checkpoint = a.checkpoint, t.resume = a.resume;
  t.augment.pad_crop = a.crop_pad, t.augment.hflip = a.hflip;

  const int classes = o.classes > 0 ? o.classes : train.num_classes;
  kiln::Trainer trainer(kiln::zoo::by_name(o.model, classes), c, t);
  fmt::print("kiln: training {} on {} ({} train / {} test images, {}x{}x{}), {} {} {}, batch {}, {} epochs\n",
             o.model, a.data, train.count, test.count, train.height, train.width, train.channels,
             o.device, o.precision, a.optimizer, o.batch, a.epochs);
  auto last_print = std::chrono::steady_clock::now();
  auto on_step = [&](const kiln::StepReport& s) {
    const auto now = std::chrono::steady_clock::now();
    if (s.step_in_epoch != s.steps_per_epoch && now - last_print < std::chrono::milliseconds(500)) return;
    last_print = now;
    fmt::print("\repoch {}/{}  step {}/{}  loss {:.4f}  {:.0f} img/s  ETA {}   ", s.epoch + 1, a.epochs,
               s.step_in_epoch, s.steps_per_epoch, s.loss, s.images_per_second, clock_text(s.eta_seconds));
    std::fflush(stdout);
  };
  auto on_epoch = [&](const kiln::EpochReport& r) {
    fmt::print("\repoch {}/{}  loss {:.4f}  train acc {:.4f}  test acc {:.4f}  {:.1f}s  {:.0f} img/s\n",
               r.epoch + 1, a.epochs, r.train_loss, r.train_accuracy, r.test_accuracy, r.seconds,
               r.images_per_second);
  };
  const auto reports = trainer.fit(train, test, on_step, on_epoch);
  const double accuracy = reports.empty() ? trainer.evaluate(test) : reports.back().test_accuracy;
  if (!reports.empty()) fmt::print("final loss: {:.6f}\n", reports.back().train_loss);
  fmt::print("test accuracy: {:.4f}\n", accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kiln: a static-graph CNN training engine with a fused Conv+BN+ReLU operator"};
  app.require_subcommand(1);
  CommonOptions common;
  TrainArgs t;

  CLI::App* plan = app.add_subcommand("plan", "compile a model and print its layers, tensors and memory plan");
  add_common(plan, common);

  CLI::App* train = app.add_subcommand("train", "train a model on a dataset and report test accuracy");
  add_common(train, common);
  train->add_option("--data,-d", t.data, "dataset directory");
  train->add_option("--format", t.format, "idx (MNIST-style) or cifar10 (binary batches)");
  train->add_option("--epochs,-e", t.epochs, "epochs");
  train->add_option("--optimizer", t.optimizer, "sgd or adamw");
  train->add_option("--lr", t.lr, "peak learning rate");
  train->add_option("--momentum", t.momentum, "SGD momentum");
  train->add_flag("--nesterov", t.nesterov, "Nesterov momentum");
  train->add_option("--weight-decay,--wd", t.weight_decay, "weight decay (SGD: L2, AdamW: decoupled)");
  train->add_option("--schedule", t.schedule, "constant, cosine or step");
  train->add_option("--warmup", t.warmup, "warm-up epochs (linear)");
  train->add_option("--step-epochs", t.step_epochs, "step schedule: epochs between decays");
  train->add_option("--gamma", t.gamma, "step schedule: decay factor");
  train->add_option("--label-smoothing", t.label_smoothing, "label smoothing for cross-entropy");
  train->add_option("--seed", t.seed, "random seed (init, shuffling, augmentation, dropout)");
  train->add_option("--workers", t.workers, "data loader threads");
  train->add_option("--crop-pad", t.crop_pad, "random crop after zero padding by this many pixels");
  train->add_flag("--hflip", t.hflip, "random horizontal flips");
  train->add_option("--checkpoint", t.checkpoint, "safetensors checkpoint written after every epoch");
  train->add_flag("--resume", t.resume, "continue from --checkpoint if it exists");
  add_cuda(train, t);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (plan->parsed()) return run_plan(common);
    return run_train(common, t);
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "\nkiln: error: {}\n", e.what());
    return 2;
  }
}

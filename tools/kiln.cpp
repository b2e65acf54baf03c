// The kiln command line: `kiln train` and `kiln plan`.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "cli/data_bench_command.h"
#include "cli/data_options.h"
#include "cli/eval_command.h"
#include "cli/pack_command.h"
#include "cli/version.h"
#include "kiln/bench.h"
#include "kiln/compile.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"
#include "kiln/options.h"
#include "kiln/schedule.h"
#include "kiln/threads.h"
#include "kiln/trainer.h"
#include "kiln/zoo.h"

#include <nlohmann/json.hpp>

namespace {

using kiln::cli::parsed_by;

// ---- option checks, made where CLI11 reads each option ----
// A bad value stops the run before any work, with a message that CLI11 opens with the flag
// ("--momentum: ...") and that gives the valid range and a value to use instead.

// A number within `ok`; anything that is not a number is left to CLI11's own conversion error.
CLI::Validator number(std::function<bool(double)> ok, std::string range, std::string fix) {
  return CLI::Validator(
      [ok = std::move(ok), range = std::move(range), fix = std::move(fix)](std::string& text) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return {};
        if (ok(v)) return {};
        return fmt::format("{} is out of range: it must be {}; {}", text, range, fix);
      },
      "", "");
}
bool finite_float(double v) { return std::isfinite(v) && std::abs(v) <= std::numeric_limits<float>::max(); }
CLI::Validator at_least(int lo, std::string fix) {
  return number([lo](double v) { return v >= lo; }, fmt::format(">= {}", lo), std::move(fix));
}

// A seed: a whole number that fits 64 bits. CLI11 alone would clamp a longer one to the largest
// (99999999999999999999 would train as 18446744073709551615, silently); other text (1.5, -1) is
// left to CLI11's conversion error or the range check.
CLI::Validator seed_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
        const size_t digits = hex ? 2 : 0;
        if (text.size() == digits) return {};
        for (size_t i = digits; i < text.size(); ++i) {
          const auto c = static_cast<unsigned char>(text[i]);
          if (!(hex ? std::isxdigit(c) : std::isdigit(c))) return {};
        }
        uint64_t value = 0;
        const char* const first = text.data() + digits;
        const auto result = std::from_chars(first, text.data() + text.size(), value, hex ? 16 : 10);
        if (result.ec != std::errc::result_out_of_range) return {};
        return fmt::format("{} is out of range: it must be a whole number from 0 to {} (64 bits); use e.g. --seed 1",
                           text, std::numeric_limits<uint64_t>::max());
      },
      "", "");
}

struct CommonOptions {
  std::string model = "digits_cnn";
  int batch = 64;
  std::string device = "auto", precision = "fp32";
  bool no_fuse = false;
  int classes = -1;
};

void add_common(CLI::App* app, CommonOptions& o) {
  app->add_option("--model,-m", o.model, fmt::format("model zoo name ({})", fmt::join(kiln::zoo::names(), ", ")))
      ->check(parsed_by([](const std::string& name) { kiln::zoo::by_name(name); }));
  app->add_option("--batch,-b", o.batch, "batch size, >= 1")->check(at_least(1, "use e.g. --batch 64"));
  app->add_option("--device", o.device, "auto (the first GPU when there is one, else the CPU), cpu, cuda or cuda:N")
      ->check(parsed_by([](const std::string& d) {
        if (d != "auto") kiln::parse_device_spec(d);
      }));
  app->add_option("--precision", o.precision, "fp32 (cpu, cuda), fp16 or bf16 (cuda)")
      ->check(parsed_by([](const std::string& p) { kiln::parse_precision(p); }));
  app->add_flag("--no-fuse", o.no_fuse,
                "run Conv, BN, ReLU and residual adds as separate layers, cbr() ones and ResNet block ends "
                "included (same tensor names, so checkpoints move between the two)");
  app->add_option("--classes", o.classes, "number of classes, >= 1; -1: the model's, or the dataset's")
      ->check(number([](double v) { return v == -1 || v >= 1; }, "-1 or >= 1",
                     "use e.g. --classes 10, or -1 for the model's (plan) or the dataset's (train) count"));
}

kiln::CompileOptions compile_options(const CommonOptions& o) {
  kiln::CompileOptions c;
  c.batch = o.batch;
  const kiln::DeviceSpec spec = kiln::resolve_device(o.device);
  c.device = spec.device, c.device_index = spec.index;
  c.precision = kiln::parse_precision(o.precision);
  c.fuse_cbr = !o.no_fuse;
  return c;
}

// What --device resolved to ("auto" picks the GPU when there is one).
std::string device_label(const kiln::CompileOptions& c) {
  if (c.device == kiln::Device::CPU) return "cpu";
  return fmt::format("cuda:{}", c.device_index);
}

// --json FILE: opened for appending before any work, so a bad path fails at once; no stream
// (not open) when no file was asked for.
std::ofstream json_appender(const std::string& path) {
  std::ofstream out;
  if (path.empty()) return out;
  out.open(path, std::ios::app);
  if (!out) kiln::fail("cannot open --json file '{}' for appending; check that its folder exists", path);
  return out;
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
  kiln::cli::DataArgs data;  // --data, --format, --workers, the image transform (add_data_options)
  std::string optimizer = "sgd", schedule = "cosine";
  std::string checkpoint;
  std::string json;  // --json FILE: one line per epoch
  int epochs = 10, warmup = 0, step_epochs = 30;
  float lr = 0.05f, momentum = 0.9f, weight_decay = 5e-4f, label_smoothing = 0.f, gamma = 0.1f;
  bool nesterov = false, resume = false, overwrite = false;
  uint64_t seed = 1;
  kiln::CudaOptions cuda;  // --no-cudnn-tune ... --pipeline-chunks (add_cuda)
  int side_stream = 1;     // --side-stream 0|1, into cuda.side_stream
  int overlap_ops = 1;     // --overlap-ops 0|1, into cuda.overlap_ops
  int conv_tf32 = 0;       // --conv-tf32 0|1, into cuda.conv_tf32
  int cuda_graphs = 1;     // --cuda-graphs 0|1, into cuda.graphs
  int threads = 1;         // --threads; main sets the default, kiln::threads()
  std::string loss_scale = "auto";  // --loss-scale, into loss_scaling.mode
  kiln::LossScaling loss_scaling;   // --loss-scale-init, --loss-scale-interval (add_loss_scale)
};

// The CUDA settings of `kiln train` and `kiln bench`: the options add_cuda filled, with the 0|1
// flags put in their fields.
kiln::CudaOptions cuda_options(const TrainArgs& a) {
  kiln::CudaOptions c = a.cuda;
  c.side_stream = a.side_stream == 1;
  c.overlap_ops = a.overlap_ops == 1;
  c.conv_tf32 = a.conv_tf32 == 1;
  c.graphs = a.cuda_graphs == 1;
  return c;
}

// Dynamic loss scaling (CompileOptions::loss_scaling, PyTorch's GradScaler); the growth and
// backoff factors keep PyTorch's 2 and 0.5.
void add_loss_scale(CLI::App* app, TrainArgs& a) {
  const std::string group = "Loss scaling";
  app->add_option("--loss-scale", a.loss_scale, "auto (dynamic for fp16, off otherwise), dynamic or off")
      ->check(parsed_by([](const std::string& name) { kiln::parse_loss_scale_mode(name); }))
      ->group(group);
  app->add_option("--loss-scale-init", a.loss_scaling.init_scale, "initial loss scale, > 0")
      ->check(number([](double v) { return v > 0 && finite_float(v); }, "finite and > 0",
                     "use e.g. --loss-scale-init 65536"))
      ->group(group);
  app->add_option("--loss-scale-interval", a.loss_scaling.growth_interval,
                  "steps without inf/NaN gradients before the scale doubles, >= 1")
      ->check(at_least(1, "use e.g. --loss-scale-interval 2000"))
      ->group(group);
}

// The CPU kernels' thread pool (kiln/threads.h), one per process. Data loader workers are not
// counted: they sleep while the prefetch queue is full and build a batch in a small fraction of
// a step, and while one runs, the pool's other threads take the pieces of the thread it delays
// (a kernel's pieces go to whichever thread is free).
// The cap is kiln::max_threads(), the one rule of set_threads and KILN_THREADS too.
void add_threads(CLI::App* app, TrainArgs& a) {
  const int cap = kiln::max_threads(), cores = kiln::available_cores();
  app->add_option("--threads", a.threads,
                  fmt::format("threads for the CPU kernels, 1 to {}; default: the cores this process may use, or "
                              "KILN_THREADS",
                              cap))
      ->check(number([cap](double v) { return v >= 1 && v <= cap; },
                     fmt::format(">= 1 and at most {} (4 x the {} cores this process may use, at least 64: more "
                                 "threads than cores only take turns on them)",
                                 cap, cores),
                     fmt::format("use e.g. --threads {} (the cores this process may use), or 1 for a single thread",
                                 cores)));
}

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
  app->add_option("--overlap-ops", a.overlap_ops,
                  "1: an op's wgrad may run on beside the next op (default); 0: every op joins its streams "
                  "[KILN_OVERLAP_OPS]")
      ->check(CLI::Range(0, 1))
      ->type_name("0|1")
      ->group(group);
  app->add_option("--cuda-graphs", a.cuda_graphs,
                  "1: replay each step as one captured CUDA Graph (default); 0: launch every op [KILN_CUDA_GRAPHS]")
      ->check(CLI::Range(0, 1))
      ->type_name("0|1")
      ->group(group);
  app->add_option("--conv-tf32", a.conv_tf32,
                  "1: fp32 convolutions may use TF32 tensor cores, as PyTorch's default; 0: true fp32 only "
                  "(default) [KILN_CONV_TF32]")
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

// --skip-bad: the files left out, each with why, after the run.
void print_skipped(const kiln::SampleSource& train, const kiln::SampleSource& test) {
  std::vector<std::string> bad = train.skipped();
  for (std::string& b : test.skipped()) bad.push_back(std::move(b));
  if (bad.empty()) return;
  fmt::print("skipped {} unreadable sample{} (--skip-bad):\n", bad.size(), bad.size() == 1 ? "" : "s");
  for (const std::string& b : bad) fmt::print("  {}\n", b);
}

// ---- Ctrl-C and SIGTERM while training: a clean stop (TrainOptions::stop) ----
// The first signal only sets the flags (nothing else is async-signal-safe here): the trainer
// finishes its step and throws kiln::Stopped, and run_train says where it stopped. A second one,
// of either kind, takes the signal's default action at once.
std::atomic<bool> g_stop{false};
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

void on_stop_signal(int sig) {
  const int saved_errno = errno;
  int none = 0;
  if (g_stop_signal.compare_exchange_strong(none, sig)) {
    g_stop.store(true);
  } else {
    struct sigaction default_action {};
    default_action.sa_handler = SIG_DFL;
    sigemptyset(&default_action.sa_mask);
    ::sigaction(sig, &default_action, nullptr);
    ::raise(sig);  // blocked while this handler runs: delivered, and fatal, as it returns
  }
  errno = saved_errno;
}

// Installs the handler for SIGINT and SIGTERM for its lifetime (a signal the process was started
// ignoring, as `nohup` or `cmd &` leave SIGINT, stays ignored), then puts the old actions back.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;  // the loader's reads go on undisturbed
    for (int i = 0; i < 2; ++i) {
      ::sigaction(kSignals[i], nullptr, &old_[i]);
      if (old_[i].sa_handler != SIG_IGN) ::sigaction(kSignals[i], &action, nullptr);
    }
  }
  ~StopSignals() {
    for (int i = 0; i < 2; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr int kSignals[2] = {SIGINT, SIGTERM};
  struct sigaction old_[2] {};
};

// The line after a clean stop; returns the exit code, 128 + the signal (130 SIGINT, 143 SIGTERM).
int report_stop(const kiln::Stopped& s, bool live) {
  const int sig = g_stop_signal.load();
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
void print_checkpoint_start(const TrainArgs& a, const kiln::Trainer& trainer, bool replacing) {
  if (a.checkpoint.empty()) return;
  if (trainer.resumed()) {
    const int done = trainer.resumed_epochs();
    fmt::print("kiln: resumed from {}: epoch {} of {} done{}\n", a.checkpoint, done, a.epochs,
               done >= a.epochs ? "; nothing left to train (raise --epochs to train on)" : "");
  } else if (a.resume) {
    fmt::print("kiln: no checkpoint at {} yet: starting fresh\n", a.checkpoint);
  } else if (replacing) {
    fmt::print("kiln: starting fresh; checkpoints go to {}, replacing the earlier run's there after the first epoch "
               "(--overwrite)\n", a.checkpoint);
  } else {
    fmt::print("kiln: starting fresh; checkpoints go to {}\n", a.checkpoint);
  }
}

// ---- checks of the options against the data, before the model is compiled ----

std::string size_text(const kiln::SampleShape& s) { return fmt::format("{}x{}x{}", s.height, s.width, s.channels); }

// Where the test split of --data is, for messages.
std::string test_set_name(const TrainArgs& a, const std::string& format) {
  const std::string& dir = a.data.data;
  if (format == "idx") return fmt::format("the test set ({}/t10k-images-idx3-ubyte)", dir);
  if (format == "cifar10") return fmt::format("the test set (test_batch.bin of {})", dir);
  if (format == "imagefolder")
    return fmt::format("the validation folder {}", a.data.val.empty() ? dir + "/val" : a.data.val);
  return fmt::format("the validation split of {}", dir);
}

// Why there is no test set to measure accuracy on.
std::string no_test_set_reason(const TrainArgs& a, const std::string& format) {
  if (format == "imagefolder" && a.data.val.empty())
    return fmt::format("{} has no validation folder (DIR/val beside DIR/train, or one given with --val DIR)",
                       a.data.data);
  return fmt::format("{} holds no images", test_set_name(a, format));
}

// Values that cannot work with this data, refused before anything is compiled or trained: a test
// set of another image size than the training set (the model is compiled for one size), a
// --crop-pad as large as the images, and a model whose poolings and strides need larger images.
void check_data_fits(const CommonOptions& o, const TrainArgs& a, const kiln::DataSplits& data) {
  const kiln::SampleShape shape = data.train->shape();
  const bool image_files = data.format == "imagefolder" || data.format == "packed";
  if (data.test->count() > 0) {
    const kiln::SampleShape t = data.test->shape();
    if (t.height != shape.height || t.width != shape.width || t.channels != shape.channels)
      kiln::fail("{} has {} images but the training set of {} has {}: the model is compiled for the training "
                 "images' size and cannot evaluate others, so nothing was trained. Give a test set of {} images{}",
                 test_set_name(a, data.format), size_text(t), a.data.data, size_text(shape), size_text(shape),
                 image_files ? ", or use --transform imagenet, which brings every image to --image-size" : "");
  }
  const int side = std::min(shape.height, shape.width);
  if (a.data.crop_pad > 0 && a.data.crop_pad >= side)
    kiln::fail("--crop-pad {} is not smaller than the images' side ({}x{} in {}): the random crop shifts the image "
               "by up to the pad, so a shift of {} or more pixels leaves a crop of padding only, without a pixel of "
               "the image. Use a pad below {}, e.g. --crop-pad {} (an eighth of the side), or 0 for no random crop",
               a.data.crop_pad, shape.height, shape.width, a.data.data, side, side, std::max(1, side / 8));
  kiln::CompileOptions probe;
  probe.input_hwc = {shape.height, shape.width, shape.channels};
  probe.fuse_cbr = !o.no_fuse;
  const int smallest = kiln::min_input_side(kiln::zoo::by_name(o.model), probe);
  if (smallest > 0 && side < smallest) {
    std::vector<std::string> fitting;  // the zoo's models that take images this small
    for (const std::string& name : kiln::zoo::names()) {
      const int need = kiln::min_input_side(kiln::zoo::by_name(name), probe);
      if (need > 0 && need <= side) fitting.push_back(name);
    }
    kiln::fail("model '{}' needs images of at least {}x{} but {} holds {}x{} images: its poolings and strides "
               "would shrink them to nothing. Use {}, or images of at least {}x{}{}",
               o.model, smallest, smallest, a.data.data, shape.height, shape.width,
               fitting.empty() ? std::string("another model")
                               : fmt::format("a model that takes {}x{} images (--model {})", shape.height,
                                             shape.width, fmt::join(fitting, ", ")),
               smallest, smallest,
               data.format == "imagefolder" && a.data.transform == "imagenet"
                   ? fmt::format(" (--image-size {})", smallest)
                   : std::string());
  }
}

// Batch normalization over one image per step: allowed (PyTorch allows it for convolutions too),
// but the run rarely learns, so it is said up front. The learning rate is named too when it is
// over 4 times what the linear scaling rule gives for one image from the default recipe (--lr 0.05
// at --batch 64).
void warn_batch_of_one(const CommonOptions& o, const TrainArgs& a, const kiln::Blueprint& model,
                       const kiln::CompileOptions& c) {
  if (o.batch != 1) return;
  const kiln::LayerGraph graph = kiln::expand(model, c);
  const int bn = graph.count(kiln::LayerKind::BatchNorm) + graph.count(kiln::LayerKind::CBR);
  if (bn == 0) return;
  const bool high_lr = a.lr > 4 * 0.05 / 64;
  fmt::print(stderr,
             "warning: --batch 1 with batch normalization ({} BN layers in {}): in training each BN layer "
             "normalizes by the statistics of one image, which are noisy and unlike the running statistics "
             "evaluation uses{}; such runs tend to stay at chance level or diverge. Use --batch 16 or more{}\n",
             bn, o.model,
             high_lr ? fmt::format(", and --lr {} is meant for batches of tens of images", a.lr) : std::string(),
             high_lr ? fmt::format(", or at least a learning rate scaled down with the batch (--lr {:.2g} is {}/64)",
                                   a.lr / 64, a.lr)
                     : std::string());
}

// A run whose mean training loss in an epoch exceeds this many times the loss of a uniform guess
// (ln classes, where an untrained model starts) has blown up: the learning rate is too high.
// A model that blew up ends at chance level even when its loss comes back down, so the run stops
// before that epoch's checkpoint replaces a good one.
constexpr double kBlownUpLoss = 10;

// A run that ends with its training accuracy no better than guessing (within 3 binomial standard
// deviations of 1/classes over an epoch's samples) has learned nothing: say so, as its rc is 0.
// Not said where an epoch holds too few images for 3 deviations to stay under twice chance.
void warn_at_chance(const std::vector<kiln::EpochReport>& reports, const kiln::SampleSource& train) {
  const int classes = train.num_classes();
  if (reports.empty() || classes < 2 || train.count() <= 0) return;
  const double chance = 1.0 / classes;
  const double bound = chance + 3 * std::sqrt(chance * (1 - chance) / double(train.count()));
  const kiln::EpochReport& last = reports.back();
  // Too few images to tell chance from twice chance: nothing to say.
  if (bound >= 2 * chance || last.train_accuracy > bound) return;
  fmt::print(stderr,
             "warning: the training accuracy of the last epoch, {:.4f}, is no better than chance (1/{} = {:.4f}; "
             "guessing stays under {:.4f} over {} images 99.9% of the time): the model has not learned. A learning "
             "rate too high for the batch (lower --lr, raise --batch, add --warmup) or too few epochs are the usual "
             "causes\n",
             last.train_accuracy, classes, chance, bound, train.count());
}

int run_train(const CommonOptions& o, const TrainArgs& a) {
  {  // an existing checkpoint without --resume or --overwrite is refused before anything is read
    kiln::TrainOptions target;
    target.checkpoint = a.checkpoint, target.resume = a.resume, target.overwrite = a.overwrite;
    kiln::check_checkpoint_target(target);  // the Trainer applies the same rule
  }
  std::ofstream json = json_appender(a.json);  // a bad path fails before anything is loaded
  kiln::set_threads(a.threads);
  const kiln::DataSplits data = kiln::open_dataset(a.data.data, kiln::cli::data_options(a.data));
  const kiln::SampleSource& train = *data.train;
  const kiln::SampleSource& test = *data.test;
  const kiln::SampleShape shape = train.shape();
  const bool image_files = data.format == "imagefolder" || data.format == "packed";
  check_data_fits(o, a, data);
  kiln::CompileOptions c = compile_options(o);
  c.input_hwc = {shape.height, shape.width, shape.channels};
  c.label_smoothing = a.label_smoothing;
  c.optimizer.kind = kiln::parse_optimizer(a.optimizer);
  c.optimizer.momentum = a.momentum;
  c.optimizer.nesterov = a.nesterov;
  c.optimizer.weight_decay = a.weight_decay;
  c.cuda = cuda_options(a);
  c.loss_scaling = a.loss_scaling;
  c.loss_scaling.mode = kiln::parse_loss_scale_mode(a.loss_scale);
  kiln::TrainOptions t;
  t.epochs = a.epochs;
  t.schedule.kind = kiln::parse_schedule(a.schedule);
  t.schedule.lr = a.lr, t.schedule.warmup_epochs = a.warmup, t.schedule.step_epochs = a.step_epochs;
  t.schedule.gamma = a.gamma;
  t.seed = a.seed, t.checkpoint = a.checkpoint, t.resume = a.resume, t.overwrite = a.overwrite;
  t.workers = kiln::cli::loader_workers(a.data, data.format);
  t.decode = kiln::parse_decode_device(a.data.decode);
  const kiln::DataOptions data_opt = kiln::cli::data_options(a.data);
  t.augment = image_files ? data_opt.transform.augment : data_opt.augment;
  t.data_recipe = kiln::cli::data_recipe(a.data, data.format);
  t.stop = &g_stop;  // set by StopSignals' handler

  const int classes = o.classes > 0 ? o.classes : train.num_classes();
  const kiln::Blueprint model = kiln::zoo::by_name(o.model, classes);
  kiln::Trainer trainer(model, c, t);
  std::error_code exists_error;
  const bool replacing = a.overwrite && std::filesystem::exists(a.checkpoint, exists_error);
  fmt::print("kiln: training {} on {} ({}: {} train / {} test images, {}x{}x{}, {} classes), {} {} {}, batch {}, "
             "{} epochs, {} loader threads\n",
             o.model, a.data.data, data.format, train.count(), test.count(), shape.height, shape.width,
             shape.channels, train.num_classes(), device_label(c), o.precision, a.optimizer, o.batch, a.epochs,
             t.workers);
  print_checkpoint_start(a, trainer, replacing);
  const bool tested = test.count() > 0;  // else no accuracy is measured, and none is printed
  if (!tested)
    fmt::print("kiln: no test set: {}, so no test accuracy will be measured\n", no_test_set_reason(a, data.format));
  warn_batch_of_one(o, a, model, c);
  if (const auto removed = trainer.removed_temp_files(); !removed.empty())
    fmt::print("kiln: removed {} temporary file{} of a checkpoint write that was interrupted: {}\n", removed.size(),
               removed.size() == 1 ? "" : "s", fmt::join(removed, ", "));
  auto last_print = std::chrono::steady_clock::now();
  // The live line rewrites itself with carriage returns: only on a terminal. Into a file or a
  // pipe (a log, CI) each epoch is one plain line and nothing else.
  const bool live = isatty(fileno(stdout)) != 0;
  int saved_epochs = trainer.resumed_epochs();  // what --checkpoint holds of this run
  auto on_step = [&](const kiln::StepReport& s) {
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
      kiln::fail("training diverged: the mean training loss of epoch {}/{} is {:.4g} after {} of its {} steps, more "
                 "than {} times the {:.2f} (ln {}) of a model that gives every class the same probability: the "
                 "updates have blown the model up, and such a run ends at chance level. Training stopped without "
                 "writing this epoch's checkpoint ({}). Lower the learning rate (--lr {} now) or add --warmup, and "
                 "start a new run",
                 s.epoch + 1, a.epochs, s.loss, s.step_in_epoch, s.steps_per_epoch, kBlownUpLoss, uniform_loss,
                 classes, kept, a.lr);
    }
    if (!live) return;
    const auto now = std::chrono::steady_clock::now();
    if (s.step_in_epoch != s.steps_per_epoch && now - last_print < std::chrono::milliseconds(500)) return;
    last_print = now;
    fmt::print("\repoch {}/{}  step {}/{}  loss {:.4f}  {:.0f} img/s  data wait {:.0f}%  ETA {}   ", s.epoch + 1,
               a.epochs, s.step_in_epoch, s.steps_per_epoch, s.loss, s.images_per_second, 100 * s.data_wait_share,
               clock_text(s.eta_seconds));
    std::fflush(stdout);
  };
  // Wall time per epoch as a user waits for it: training, the state check, evaluation and the
  // checkpoint (EpochReport::seconds counts the training steps alone).
  auto epoch_start = std::chrono::steady_clock::now();
  auto on_epoch = [&](const kiln::EpochReport& r) {
    const auto now = std::chrono::steady_clock::now();
    const double wall = std::chrono::duration<double>(now - epoch_start).count();
    epoch_start = now;
    if (!a.checkpoint.empty()) saved_epochs = r.epoch + 1;
    // No test set: null in the JSON line and nothing on the epoch's line, never a 0 that reads as
    // an accuracy.
    const nlohmann::json test_top1 = tested ? nlohmann::json(r.test_accuracy) : nlohmann::json(nullptr);
    const nlohmann::json test_top5 = tested ? nlohmann::json(r.test_top5_accuracy) : nlohmann::json(nullptr);
    if (json.is_open()) {
      json << nlohmann::json{{"framework", "kiln"}, {"model", o.model}, {"data", a.data.data},
                             {"format", data.format}, {"workers", t.workers}, {"decode", a.data.decode}, {"device", device_label(c)},
                             {"precision", o.precision}, {"batch", o.batch}, {"epoch", r.epoch + 1},
                             {"epochs", a.epochs}, {"wall_seconds", wall}, {"train_seconds", r.seconds},
                             {"check_seconds", r.check_seconds}, {"eval_seconds", r.eval_seconds},
                             {"checkpoint_seconds", r.checkpoint_seconds},
                             {"data_wait_seconds", r.data_wait_seconds}, {"decoder", r.decoder},
                             {"train_loss", r.train_loss}, {"train_accuracy", r.train_accuracy},
                             {"test_accuracy", test_top1}, {"train_top5_accuracy", r.train_top5_accuracy},
                             {"test_top5_accuracy", test_top5}, {"images_per_second", r.images_per_second}}
                  .dump()
           << std::endl;
    }
    const std::string top5 = classes > 5 ? fmt::format(" (top-5 {:.4f})", r.test_top5_accuracy) : std::string();
    const std::string test_acc = tested ? fmt::format("  test acc {:.4f}{}", r.test_accuracy, top5) : std::string();
    fmt::print("{}epoch {}/{}  loss {:.4f}  train acc {:.4f}{}  {:.1f}s  {:.0f} img/s  data wait {:.0f}%\n",
               live ? "\r" : "", r.epoch + 1, a.epochs, r.train_loss, r.train_accuracy, test_acc, r.seconds,
               r.images_per_second, 100 * r.data_wait_seconds / std::max(r.seconds, 1e-9));
  };
  std::vector<kiln::EpochReport> reports;
  try {
    StopSignals stop_signals;  // only while training
    reports = trainer.fit(train, test, on_step, on_epoch);
  } catch (const kiln::Stopped& stopped) {
    return report_stop(stopped, live);  // the Trainer, and the checkpoint's lock, go as it returns
  }
  if (!reports.empty()) fmt::print("final loss: {:.6f}\n", reports.back().train_loss);
  if (!reports.empty() && !reports.back().decoder.empty()) fmt::print("decoded by {}\n", reports.back().decoder);
  warn_at_chance(reports, train);
  print_skipped(train, test);
  if (!tested) {
    fmt::print("no test set: test accuracy not measured ({})\n", no_test_set_reason(a, data.format));
    return 0;
  }
  kiln::Trainer::Accuracy accuracy{reports.empty() ? 0 : reports.back().test_accuracy,
                                   reports.empty() ? 0 : reports.back().test_top5_accuracy};
  if (reports.empty()) accuracy = trainer.evaluate_accuracy(test);
  if (classes > 5) fmt::print("test top-5 accuracy: {:.4f}\n", accuracy.top5);
  fmt::print("test accuracy: {:.4f}\n", accuracy.top1);
  return 0;
}

struct BenchArgs {
  kiln::BenchOptions bench;
  std::string json;  // --json FILE
};

std::string gib(size_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / double(1ull << 30)); }

// The profiled step: time against floor by op kind, then the ops furthest above their floors.
void print_profile(const kiln::BenchResult& r) {
  std::map<std::string, std::array<double, 3>> by_kind;  // ms, floor ms, count
  double total = 0, floor = 0;
  for (const kiln::OpProfile& op : r.profile) {
    auto& k = by_kind[op.kind];
    k[0] += op.ms, k[1] += op.floor_ms, k[2] += 1;
    total += op.ms, floor += op.floor_ms;
  }
  fmt::print("profiled step, op by op with a wait after each: {:.2f} ms (floor {:.2f} ms); by op kind:\n", total, floor);
  std::vector<std::pair<std::string, std::array<double, 3>>> kinds(by_kind.begin(), by_kind.end());
  std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) { return a.second[0] > b.second[0]; });
  for (const auto& [kind, k] : kinds)
    fmt::print("  {:<18} {:4.0f} ops {:8.2f} ms  floor {:8.2f} ms  gap {:7.2f} ms\n", kind, k[2], k[0], k[1], k[0] - k[1]);
  std::vector<const kiln::OpProfile*> ops;
  for (const kiln::OpProfile& op : r.profile) ops.push_back(&op);
  std::sort(ops.begin(), ops.end(), [](auto* a, auto* b) { return a->ms - a->floor_ms > b->ms - b->floor_ms; });
  fmt::print("largest gaps to the floor:\n");
  for (size_t i = 0; i < std::min<size_t>(12, ops.size()); ++i)
    fmt::print("  {:<8} {:<14} {:<28} {:7.3f} ms  floor {:7.3f} ms ({:.1f} GFLOP, {:.1f} MB)\n", ops[i]->list,
               ops[i]->kind, ops[i]->layer, ops[i]->ms, ops[i]->floor_ms, ops[i]->flops * 1e-9, ops[i]->bytes * 1e-6);
}

// Throughput on synthetic data already on the device (kiln/bench.h), printed and optionally
// written as one JSON object for bench/report_models.py.
int run_bench(const CommonOptions& o, const TrainArgs& t, const BenchArgs& b) {
  kiln::set_threads(t.threads);
  kiln::CompileOptions c = compile_options(o);
  c.optimizer.kind = kiln::OptimizerKind::SGD;  // PyTorch's recipe in bench/torch_models.py
  c.optimizer.momentum = 0.9f, c.optimizer.nesterov = true, c.optimizer.weight_decay = 1e-4f;
  c.cuda = cuda_options(t);
  std::ofstream json = json_appender(b.json);  // a bad path fails before the benchmark runs
  const kiln::BenchResult r = kiln::bench_training(kiln::zoo::by_name(o.model, o.classes), c, b.bench);
  const auto [lo, hi] = std::minmax_element(r.step_ms.begin(), r.step_ms.end());
  fmt::print("kiln bench: {} on {} {}, batch {}: {:.0f} img/s (median step {:.2f} ms of {}, {:.2f}-{:.2f})\n",
             o.model, device_label(c), o.precision, o.batch, r.images_per_second, r.median_step_ms,
             r.step_ms.size(), *lo, *hi);
  fmt::print("first step after {:.1f} s; memory: planned {} + workspace {}, device {}; loss {:.4f} -> {:.4f}\n",
             r.first_step_seconds, gib(r.planned_bytes), gib(r.workspace_bytes),
             c.device == kiln::Device::CUDA ? gib(r.device_bytes) : std::string("n/a"), r.first_loss, r.last_loss);
  if (b.bench.profile) print_profile(r);
  if (!b.json.empty()) {
    nlohmann::json ops = nlohmann::json::array();
    for (const kiln::OpProfile& op : r.profile)
      ops.push_back({{"list", op.list}, {"kind", op.kind}, {"layer", op.layer}, {"ms", op.ms}, {"flops", op.flops},
                     {"bytes", op.bytes}, {"floor_ms", op.floor_ms}});
    const nlohmann::json j = {{"framework", "kiln"},
                              {"profile", ops},
                              {"model", o.model},
                              {"device", device_label(c)},
                              {"precision", o.precision},
                              {"batch", o.batch},
                              {"fuse_cbr", c.fuse_cbr},
                              {"warmup", b.bench.warmup},
                              {"images_per_second", r.images_per_second},
                              {"median_step_ms", r.median_step_ms},
                              {"step_ms", r.step_ms},
                              {"first_step_seconds", r.first_step_seconds},
                              {"planned_bytes", r.planned_bytes},
                              {"workspace_bytes", r.workspace_bytes},
                              {"device_bytes", r.device_bytes},
                              {"first_loss", r.first_loss},
                              {"last_loss", r.last_loss}};
    json << j.dump() << std::endl;
  }
  return 0;
}

// Edit distance with adjacent transpositions counted as one edit ("trian" is 1 from "train").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The candidate nearest to `word`, if it is close enough to be a likely typo.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_distance) best = c, best_distance = d;
  }
  return best;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

// `kiln trian ...`: CLI11 alone would say only that a subcommand is required.
void check_subcommand(const CLI::App& app, int argc, char** argv) {
  const std::vector<std::string> names = subcommand_names(app);
  const std::string list = fmt::format("{}", fmt::join(names, ", "));
  if (argc < 2)
    throw CLI::RequiredError(fmt::format("a subcommand is required: {} (kiln <subcommand> --help)", list),
                             CLI::ExitCodes::RequiredError);
  const std::string word = argv[1];
  if (word.empty() || word[0] == '-' || std::find(names.begin(), names.end(), word) != names.end()) return;
  const std::string guess = nearest(word, names);
  throw CLI::ExtrasError(fmt::format("unknown subcommand '{}'{}; the subcommands are {}", word,
                                     guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess), list),
                         CLI::ExitCodes::ExtrasError);
}

// `kiln train --epoch 2`: each unknown option with the subcommand's option nearest to it. Empty when
// the stray words hold no option (CLI11's own message lists them).
std::string unknown_options_message(const CLI::App& sub, const std::vector<std::string>& extras) {
  std::vector<std::string> known;
  for (const CLI::Option* opt : sub.get_options())
    for (const std::string& name : opt->get_lnames()) known.push_back("--" + name);
  std::string out;
  for (const std::string& word : extras) {
    if (word.rfind("--", 0) != 0) continue;
    const std::string flag = word.substr(0, word.find('='));
    const std::string guess = nearest(flag, known);
    out += fmt::format("{}unknown option '{}'{}", out.empty() ? "" : "; ", flag,
                       guess.empty() ? "" : fmt::format(" (did you mean '{}'?)", guess));
  }
  if (out.empty()) return {};
  return fmt::format("{}; kiln {} --help lists the options", out, sub.get_name());
}

// Checks between options, after parsing: still errors naming the flags, before any work.
void check_train_options(const TrainArgs& t) {
  if (t.resume && t.checkpoint.empty())
    throw CLI::RequiresError("--resume needs --checkpoint FILE, the checkpoint to continue from; add "
                             "--checkpoint runs/run.safetensors or drop --resume",
                             CLI::ExitCodes::RequiresError);
  if (t.overwrite && t.checkpoint.empty())
    throw CLI::RequiresError("--overwrite needs --checkpoint FILE, the checkpoint to replace; add --checkpoint "
                             "runs/run.safetensors or drop --overwrite",
                             CLI::ExitCodes::RequiresError);
  if (t.resume && t.overwrite)
    throw CLI::ValidationError("--resume and --overwrite exclude each other: --resume continues the run in "
                               "--checkpoint, --overwrite replaces it with a fresh one; drop one",
                               CLI::ExitCodes::ValidationError);
  // A warm-up as long as the run never reaches --lr (cosine never decays either): the run would end
  // at the peak of a schedule it never finished.
  if (t.warmup >= t.epochs)
    throw CLI::ValidationError(
        "--warmup", fmt::format("{} is not shorter than the run (--epochs {}): the learning rate would only "
                                "rise, reaching --lr {} at best at the last step, and never decay; use a warm-up "
                                "shorter than the run, e.g. --warmup {}",
                                t.warmup, t.epochs, t.lr,
                                t.epochs >= 2 ? fmt::format("{} (or 0 for none)", std::max(1, t.epochs / 10))
                                              : std::string("0 (none), or more --epochs")));
  if (t.nesterov && t.momentum == 0 && t.optimizer == "sgd")
    throw CLI::ValidationError("--nesterov", "needs --momentum > 0 (as in PyTorch); use e.g. --momentum 0.9, or "
                                             "--no-nesterov for plain SGD");
}

}  // namespace

int main(int argc, char** argv) {
  // Into a file or a pipe stdio would buffer whole blocks: a log stays empty for minutes and a
  // killed run loses it all. One line at a time instead (fmt::print writes through stdio); a
  // terminal is line-buffered already.
  if (isatty(fileno(stdout)) == 0) std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"kiln: a static-graph CNN training engine with a fused Conv+BN+ReLU operator"};
  app.set_version_flag("--version", std::function<std::string()>(kiln::cli::version_text), "print the version; exit");
  app.require_subcommand(1);
  // For every option (subcommands copy these when made): --help shows the default, and a later
  // value overrides an earlier one, so `scripts/demo.sh --epochs 2` overrides the script's own.
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CommonOptions common;
  TrainArgs t;
  try {
    t.threads = kiln::threads();  // KILN_THREADS or the cores available, shown by --help
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "kiln: error: {}\n", e.what());
    return 2;
  }

  CLI::App* plan = app.add_subcommand("plan", "compile a model and print its layers, tensors and memory plan");
  add_common(plan, common);

  CLI::App* train = app.add_subcommand("train", "train a model on a dataset and report test accuracy");
  add_common(train, common);
  kiln::cli::add_data_options(train, t.data, true);
  train->add_option("--epochs,-e", t.epochs, "epochs, >= 1")->check(at_least(1, "use e.g. --epochs 10"));
  train->add_option("--optimizer", t.optimizer, "sgd or adamw")
      ->check(parsed_by([](const std::string& name) { kiln::parse_optimizer(name); }));
  train->add_option("--lr", t.lr, "peak learning rate, > 0")
      ->check(number([](double v) { return v > 0 && finite_float(v); }, "a finite number > 0",
                     "use e.g. --lr 0.05 (SGD) or --lr 0.001 (AdamW)"));
  train->add_option("--momentum", t.momentum, "SGD momentum, in [0, 1)")
      ->check(number([](double v) { return v >= 0 && v < 1; }, "in [0, 1)",
                     "use e.g. --momentum 0.9, or 0 for plain SGD"));
  train->add_flag("--nesterov,!--no-nesterov", t.nesterov, "Nesterov momentum (SGD, needs --momentum > 0)");
  train->add_option("--weight-decay,--wd", t.weight_decay, "weight decay (SGD: L2, AdamW: decoupled), >= 0")
      ->check(number([](double v) { return v >= 0 && finite_float(v); }, "a finite number >= 0",
                     "use e.g. --weight-decay 5e-4, or 0 for none"));
  train->add_option("--schedule", t.schedule, "constant, cosine or step")
      ->check(parsed_by([](const std::string& name) { kiln::parse_schedule(name); }));
  train->add_option("--warmup", t.warmup, "warm-up epochs (linear), >= 0")
      ->check(at_least(0, "use e.g. --warmup 2, or 0 for no warm-up"));
  train->add_option("--step-epochs", t.step_epochs, "step schedule: epochs between decays, >= 1")
      ->check(at_least(1, "use e.g. --step-epochs 30"));
  train->add_option("--gamma", t.gamma, "step schedule: decay factor, in (0, 1]")
      ->check(number([](double v) { return v > 0 && v <= 1; }, "in (0, 1]", "use e.g. --gamma 0.1"));
  train->add_option("--label-smoothing", t.label_smoothing, "label smoothing for cross-entropy, in [0, 1)")
      ->check(number([](double v) { return v >= 0 && v < 1; }, "in [0, 1)",
                     "use e.g. --label-smoothing 0.1, or 0 for none"));
  train->add_option("--seed", t.seed, "random seed (init, shuffling, augmentation, dropout), 0 to 2^64-1")
      ->check(number([](double v) { return v >= 0; }, "a whole number from 0 to 18446744073709551615",
                     "use e.g. --seed 1"))
      ->check(seed_number());
  train->add_option("--checkpoint", t.checkpoint,
                    "safetensors checkpoint written atomically after every epoch; its folder must exist; <file>.lock "
                    "guards it while training; an existing file is refused unless --resume or --overwrite")
      ->type_name("FILE");
  train->add_option("--json", t.json, "append one JSON line per epoch (times, loss, accuracies) to this file")
      ->type_name("FILE");
  train->add_flag("--resume", t.resume,
                  "continue from --checkpoint if it exists, else start fresh (needs --checkpoint); the run's settings "
                  "must match the checkpoint's, only --epochs may change");
  train->add_flag("--overwrite", t.overwrite,
                  "start fresh even though --checkpoint exists: it is replaced after the first epoch (needs "
                  "--checkpoint; not with --resume)");
  add_threads(train, t);
  add_cuda(train, t);
  add_loss_scale(train, t);

  BenchArgs b;
  CLI::App* bench = app.add_subcommand(
      "bench", "train on synthetic data already on the device and print images/s, memory and time to the first step");
  add_common(bench, common);
  bench->add_option("--steps", b.bench.steps, "timed steps, >= 1")->check(at_least(1, "use e.g. --steps 20"));
  bench->add_option("--warmup", b.bench.warmup, "untimed steps before them, >= 0")
      ->check(at_least(0, "use e.g. --warmup 5"));
  bench->add_option("--seed", b.bench.seed, "random seed (initialization, synthetic data), 0 to 2^64-1")
      ->check(number([](double v) { return v >= 0; }, "a whole number from 0 to 18446744073709551615",
                     "use e.g. --seed 1"))
      ->check(seed_number());
  bench->add_flag("--profile", b.bench.profile,
                  "then one step op by op, each op timed and set against its floor (FLOPs at --peak-tflops, bytes at "
                  "--peak-tbps)");
  bench->add_option("--peak-tflops", b.bench.peak_tflops, "tensor-core rate for the floors (default: an H200's fp16)")
      ->check(number([](double v) { return v > 0; }, "> 0", "use e.g. --peak-tflops 737"));
  bench->add_option("--peak-tbps", b.bench.peak_tbps, "memory bandwidth in TB/s for the floors (default: an H200's)")
      ->check(number([](double v) { return v > 0; }, "> 0", "use e.g. --peak-tbps 4.18"));
  bench->add_option("--json", b.json, "append the result as one JSON line to this file")->type_name("FILE");
  add_threads(bench, t);
  add_cuda(bench, t);

  kiln::cli::DataBenchArgs data_bench_args;
  CLI::App* data_bench = kiln::cli::add_data_bench_command(app, data_bench_args);
  kiln::cli::EvalArgs eval_args;
  CLI::App* eval = kiln::cli::add_eval_command(app, eval_args);
  kiln::cli::PackCommandArgs pack_args;
  CLI::App* pack = kiln::cli::add_pack_command(app, pack_args);

  try {
    check_subcommand(app, argc, argv);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ExtrasError& e) {
      CLI::App* sub = plan->parsed()         ? plan
                      : train->parsed()      ? train
                      : bench->parsed()      ? bench
                      : data_bench->parsed() ? data_bench
                      : eval->parsed()       ? eval
                      : pack->parsed()       ? pack
                                             : nullptr;
      const std::string message = sub ? unknown_options_message(*sub, sub->remaining()) : std::string();
      if (message.empty()) throw;
      throw CLI::ExtrasError(message, CLI::ExitCodes::ExtrasError);
    }
    if (train->parsed()) check_train_options(t);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (plan->parsed()) return run_plan(common);
    if (bench->parsed()) return run_bench(common, t, b);
    if (data_bench->parsed()) return kiln::cli::run_data_bench(data_bench_args);
    if (eval->parsed()) return kiln::cli::run_eval(eval_args, *eval);
    if (pack->parsed()) return kiln::cli::run_pack(pack_args);
    return run_train(common, t);
  } catch (const kiln::Error& e) {
    fmt::print(stderr, "\nkiln: error: {}\n", e.what());
    return 2;
  }
}

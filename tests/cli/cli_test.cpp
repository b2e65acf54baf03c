// The `kiln` command line, run as a user runs it (the built binary, stdout and stderr together):
// bad options stop before any work with a message naming the flag, the valid range and a fix;
// --help shows defaults; a mistyped subcommand gets a suggestion; later options override earlier
// ones (scripts/demo.sh relies on it); `kiln plan --no-fuse` lists no CBR layer; --threads and
// KILN_THREADS are checked.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/checkpoint.h"
#include "kiln/device.h"
#include "kiln/threads.h"
#include "support/kiln_cli.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"
#include "support/program_fixture.h"

namespace {

using kiln::testing::expect_contains;
using kiln::testing::kiln;
using kiln::testing::Result;

// A dataset directory that does not exist: a run that gets past option checking stops at once
// on it instead of training.
const std::string kNoData = "/nonexistent/kiln_cli_test_data";

// A rejected command: non-zero exit, every part in the message, and nothing started.
void expect_rejected(const std::string& args, const std::vector<std::string>& parts) {
  const Result r = kiln(args);
  EXPECT_NE(r.rc, 0) << "kiln " << args << " was accepted:\n" << r.output;
  expect_contains(r, parts, args);
  EXPECT_EQ(r.output.find("kiln: training"), std::string::npos) << "kiln " << args << " started training";
  EXPECT_EQ(r.output.find("dataset directory"), std::string::npos)
      << "kiln " << args << " got past option checking:\n" << r.output;
}

TEST(Cli, OutOfRangeNumbersNameTheFlagTheRangeAndAFix) {
  const std::string train = "train --data " + kNoData + " ";
  struct Case {
    std::string args;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"--warmup -2", {"--warmup", ">= 0", "for no warm-up"}},
      {"--step-epochs 0", {"--step-epochs", ">= 1", "--step-epochs 30"}},
      {"--seed -1", {"--seed", "-1", "from 0", "--seed 1"}},
      {"--momentum -1", {"--momentum", "[0, 1)", "--momentum 0.9"}},
      {"--momentum 1", {"--momentum", "[0, 1)"}},
      {"--lr 0", {"--lr", "> 0", "--lr 0.05"}},
      {"--lr -0.1", {"--lr", "> 0"}},
      {"--lr nan", {"--lr", "finite"}},
      {"--lr inf", {"--lr", "finite"}},
      {"--lr 1e39", {"--lr", "finite"}},
      {"--epochs 0", {"--epochs", ">= 1", "--epochs 10"}},
      {"--batch 0", {"--batch", ">= 1", "--batch 64"}},
      {"--label-smoothing 1", {"--label-smoothing", "[0, 1)", "--label-smoothing 0.1"}},
      {"--label-smoothing -0.1", {"--label-smoothing", "[0, 1)"}},
      {"--crop-pad -1", {"--crop-pad", ">= 0", "--crop-pad 4"}},
      {"--workers -1", {"--workers", ">= 0", "--workers 2"}},
      {"--weight-decay -1", {"--weight-decay", ">= 0"}},
      {"--gamma 0", {"--gamma", "(0, 1]"}},
      {"--lars-eta 0", {"--lars-eta", "> 0", "--lars-eta 0.001"}},
      {"--lars-eta -0.01", {"--lars-eta", "> 0"}},
      {"--lars-eta nan", {"--lars-eta", "finite"}},
      {"--lars-eta inf", {"--lars-eta", "finite"}},
      {"--classes 0", {"--classes", ">= 1"}},
  };
  for (const Case& c : cases) expect_rejected(train + c.args, c.parts);
  expect_rejected("plan --batch -4", {"--batch", ">= 1"});
}

TEST(Cli, UnknownNamesAreRejectedWhereTheyAreParsed) {
  const std::string train = "train --data " + kNoData + " ";
  expect_rejected(train + "--model resnet1000", {"--model", "resnet1000", "digits_cnn", "vgg16_bn"});
  expect_rejected(train + "--optimizer lamb", {"--optimizer", "lamb", "adamw", "lars"});
  expect_rejected(train + "--schedule linear", {"--schedule", "linear", "cosine"});
  expect_rejected(train + "--format png", {"--format", "png", "cifar10", "imagefolder"});
  expect_rejected(train + "--precision fp8", {"--precision", "fp8", "fp32"});
  expect_rejected(train + "--device tpu", {"--device", "tpu", "cuda"});
  expect_rejected("plan --model resnet1000", {"--model", "resnet1000"});
}

TEST(Cli, LossScaleFlagsAreChecked) {
  const std::string train = "train --data " + kNoData + " ";
  expect_rejected(train + "--loss-scale always", {"--loss-scale", "always", "dynamic", "off"});
  expect_rejected(train + "--loss-scale-init 0", {"--loss-scale-init", "> 0", "--loss-scale-init 65536"});
  expect_rejected(train + "--loss-scale-interval 0", {"--loss-scale-interval", ">= 1"});
  const Result r = kiln("train --help");
  expect_contains(r, {"--loss-scale", "auto", "65536", "2000"}, "train --help");
}

TEST(Cli, OptionsThatNeedEachOther) {
  const std::string train = "train --data " + kNoData + " ";
  expect_rejected(train + "--resume", {"--resume", "--checkpoint"});
  expect_rejected(train + "--overwrite", {"--overwrite needs --checkpoint", "drop --overwrite"});
  expect_rejected(train + "--resume --overwrite --checkpoint /nonexistent/kiln/run.safetensors",
                  {"--resume and --overwrite exclude each other", "drop one"});
  expect_rejected(train + "--nesterov --momentum 0", {"--nesterov", "--momentum", "--no-nesterov"});
}

// --optimizer lars and its options parse (the run gets as far as the data), and --help shows them.
TEST(Cli, LarsOptionsParse) {
  const std::string args =
      "train --optimizer lars --lars-eta 0.002 --lars-skip-1d --no-lars-skip-1d --momentum 0.9 --data " + kNoData;
  Result r = kiln(args);
  EXPECT_NE(r.rc, 0);
  expect_contains(r, {"dataset directory", kNoData}, args);
  r = kiln("train --help");
  expect_contains(r, {"lars: LARS", "sgd: SGD", "adamw: Adam", "--lars-eta FLOAT=0.001", "--lars-skip-1d",
                      "--no-lars-skip-1d"},
                  "train --help");
}

// The optimizers' flags come from their families' settings: a flag the chosen optimizer does not
// take is refused naming the optimizer, whose the flag is and what the chosen one takes; a shared
// flag (--momentum, --weight-decay) goes to the chosen optimizer.
TEST(Cli, AFlagTheChosenOptimizerDoesNotTakeIsRefused) {
  const std::string train = "train --data " + kNoData + " ";
  expect_rejected(train + "--optimizer adamw --nesterov",
                  {"--nesterov", "the adamw optimizer has no nesterov setting", "sgd's", "--eps", "--weight-decay",
                   "--optimizer sgd"});
  expect_rejected(train + "--optimizer adamw --momentum 0.9", {"--momentum", "adamw", "no momentum setting"});
  expect_rejected(train + "--lars-eta 0.002", {"--lars-eta", "the sgd optimizer", "lars's", "--optimizer lars"});
  for (const char* args :
       {"--optimizer adamw --weight-decay 0.05 --eps 1e-6", "--optimizer lars --momentum 0.8", "--momentum 0.5 --wd 0"}) {
    const Result r = kiln(train + args);
    expect_contains(r, {"dataset directory", kNoData}, args);
  }
}

// A LARS run trains, and its checkpoint's recipe records the optimizer and what --lars-eta and
// --no-lars-skip-1d set.
TEST(KilnCli, LarsTrainsAndItsRecipeRecordsItsOptions) {
  const std::string dir = kiln::testing::shared_digits_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte")) GTEST_SKIP() << "no digits at " << dir;
  kiln::testing::TempDir tmp;
  kiln::testing::write_first_digits(dir, tmp.file("digits"), 1024, 256);
  const std::string ckpt = tmp.file("lars.safetensors");
  const std::string args = "train --device cpu --model digits_cnn --data " + tmp.file("digits") +
                           " --epochs 2 --batch 64 --workers 1 --optimizer lars --lr 2 --weight-decay 1e-4 "
                           "--lars-eta 0.002 --no-lars-skip-1d --checkpoint " + ckpt;
  const Result r = kiln(args);
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"lars", "epoch 2/2"}, args);
  const auto meta = kiln::load_safetensors(ckpt).metadata;
  EXPECT_EQ(meta.at("recipe.optimizer"), "lars");
  EXPECT_EQ(meta.at("recipe.trust_coefficient"), "0.002");
  EXPECT_EQ(meta.at("recipe.lars_skip_1d"), "false");
  EXPECT_EQ(meta.at("recipe.momentum"), "0.9");
  EXPECT_EQ(meta.count("recipe.nesterov"), 0u);
}

TEST(Cli, MistypedSubcommandOrOptionGetsTheNearestName) {
  Result r = kiln("trian --epochs 1");
  EXPECT_NE(r.rc, 0);
  expect_contains(r, {"unknown subcommand 'trian'", "did you mean 'train'", "plan, train"}, "trian");
  r = kiln("pln");
  EXPECT_NE(r.rc, 0);
  expect_contains(r, {"'pln'", "did you mean 'plan'"}, "pln");
  r = kiln("");
  EXPECT_NE(r.rc, 0);
  expect_contains(r, {"subcommand", "plan, train"}, "");
  expect_rejected("train --data " + kNoData + " --epoch 2", {"--epoch", "did you mean '--epochs'"});
}

TEST(Cli, HelpShowsDefaults) {
  const Result r = kiln("train --help");
  EXPECT_EQ(r.rc, 0) << r.output;
  expect_contains(r,
                  {"--model TEXT=digits_cnn", "--batch INT=64", "--epochs INT=10", "--lr FLOAT=0.05",
                   "--momentum FLOAT", "sgd: momentum", "--schedule TEXT=cosine", "--optimizer TEXT=sgd",
                   "--weight-decay,--wd FLOAT=0.0005", "TEXT=data/digits",
                   "--workers INT=auto", "--overwrite", "refused unless --resume or --overwrite"},
                  "train --help");
}

TEST(Cli, LaterOptionsOverrideEarlierOnes) {
  // What scripts/demo.sh does: its own options first, then the user's.
  Result r = kiln("plan --batch 8 --batch 4");
  EXPECT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"batch 4,"}, "plan --batch 8 --batch 4");
  r = kiln("train --data /nonexistent/first --data " + kNoData);
  EXPECT_NE(r.rc, 0);
  expect_contains(r, {kNoData}, "train --data ... --data ...");
  EXPECT_EQ(r.output.find("/nonexistent/first"), std::string::npos) << r.output;
  // The demo passes --nesterov; --no-nesterov takes it back (else momentum 0 would be refused).
  r = kiln("train --nesterov --momentum 0.9 --momentum 0 --no-nesterov --data " + kNoData);
  expect_contains(r, {"dataset directory", kNoData}, "train ... --no-nesterov");
}

TEST(Cli, PlanWithoutFusionListsNoCbrLayer) {
  const Result fused = kiln("plan --model digits_cnn --batch 2");
  ASSERT_EQ(fused.rc, 0) << fused.output;
  expect_contains(fused, {"cbr fusion on", "CBR layers: 4"}, "plan");
  const Result unfused = kiln("plan --model digits_cnn --batch 2 --no-fuse");
  ASSERT_EQ(unfused.rc, 0) << unfused.output;
  expect_contains(unfused, {"cbr fusion off", "CBR layers: 0", "conv1.conv.weight", "conv1.bn.running_var"},
                  "plan --no-fuse");
  EXPECT_EQ(unfused.output.find(" cbr   "), std::string::npos) << unfused.output;  // a layer of kind cbr
  EXPECT_NE(fused.output.find(" cbr   "), std::string::npos) << fused.output;
}

// --fuse-seams: the plan names the seams (digits_cnn: conv1 -> conv2 and conv3 -> conv4), the
// producers' BN+ReLU outputs are gone from its tensors, and --no-fuse refuses it.
TEST(Cli, PlanWithFusionAcrossLayersShowsTheSeams) {
  const Result seams = kiln("plan --model digits_cnn --batch 2 --device cpu --fuse-seams");
  ASSERT_EQ(seams.rc, 0) << seams.output;
  expect_contains(seams, {"fusion across layers on (2 seams)", "[BN+ReLU applied by its consumers]",
                          "[applies its input's BN+ReLU]", "conv1:scale", "conv3:shift"},
                  "plan --fuse-seams");
  EXPECT_EQ(seams.output.find("conv1:bitmask"), std::string::npos) << seams.output;
  const Result plain = kiln("plan --model digits_cnn --batch 2 --device cpu");
  expect_contains(plain, {"fusion across layers off", "conv1:bitmask"}, "plan");
  const Result no_fuse = kiln("plan --model digits_cnn --batch 2 --device cpu --fuse-seams --no-fuse");
  EXPECT_NE(no_fuse.rc, 0);
  expect_contains(no_fuse, {"--fuse-seams", "--no-fuse"}, "plan --fuse-seams --no-fuse");
}

// A block end that feeds the next block's body and shortcut reads their two gradients: the summed
// gradient of layer1.0's output is no tensor of the plan, while the max-pool's output (which feeds
// a block whose first layer is a CBR) keeps its sum. --fuse-grad-sums, the switch that kept the
// sums, is retired (issue 48) and refused as an unknown flag.
TEST(Cli, PlanOfAResnetHasNoSummedGradientForBlockEndsThatFeedABlock) {
  const Result plan = kiln("plan --model resnet18 --batch 2 --device cpu");
  ASSERT_EQ(plan.rc, 0) << plan.output;
  expect_contains(plan, {"d:maxpool"}, "plan");
  EXPECT_EQ(plan.output.find("d:layer1.0.relu "), std::string::npos) << plan.output;
  const Result unfused = kiln("plan --model resnet18 --batch 2 --device cpu --no-fuse");
  expect_contains(unfused, {"d:layer1.0.relu "}, "plan --no-fuse");
  const Result retired = kiln("plan --model resnet18 --batch 2 --device cpu --fuse-grad-sums 0");
  EXPECT_NE(retired.rc, 0);
  expect_contains(retired, {"--fuse-grad-sums"}, "plan --fuse-grad-sums 0");
}

}  // namespace

namespace {

// Into a pipe (a log, CI) the live progress line stays off: one plain line per epoch and no
// carriage returns (a terminal gets the live line).
TEST(KilnCli, OutputIntoAPipeIsOnePlainLinePerEpoch) {
  const std::string dir = kiln::testing::shared_digits_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte")) GTEST_SKIP() << "no digits at " << dir;
  const std::string args = "train --model digits_cnn --data " + dir + " --epochs 2 --batch 256 --workers 1";
  const Result r = kiln(args);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(r.output.find('\r'), std::string::npos) << "carriage returns in a log:\n" << r.output;
  expect_contains(r, {"\nepoch 1/2  loss", "\nepoch 2/2  loss", "test accuracy:"}, args);
  // No --device: the GPU when there is one, else the CPU, and the first line says which.
  expect_contains(r, {kiln::cuda_device_count() > 0 ? "), cuda:0 fp32 sgd" : "), cpu fp32 sgd"}, args);
  EXPECT_EQ(r.output.find("step "), std::string::npos) << "live step lines in a log:\n" << r.output;
}

}  // namespace

namespace {

// `kiln bench` on the CPU (the GPU run is the same code with another device): the requested
// number of timed steps, a median that is one of them, finite losses, the planned arena as
// `kiln plan` would place it, and one JSON line appended per run.
TEST(KilnCli, BenchTimesTheRequestedStepsAndAppendsJson) {
  kiln::testing::TempDir tmp;
  const std::string json = tmp.file("bench.jsonl");
  const std::string args = "bench --device cpu --model digits_cnn --batch 16 --steps 3 --warmup 1 --json " + json;
  for (int run = 0; run < 2; ++run) {
    const Result r = kiln(args);
    ASSERT_EQ(r.rc, 0) << r.output;
    expect_contains(r, {"kiln bench: digits_cnn on cpu fp32, batch 16 at 20x20:", "img/s (median step", "of 3",
                        "first step after", "memory: planned"},
                    args);
  }
  std::ifstream in(json);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  for (const nlohmann::json& j : lines) {
    const std::vector<double> steps = j["step_ms"];
    ASSERT_EQ(steps.size(), 3u);
    std::vector<double> sorted = steps;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_DOUBLE_EQ(j["median_step_ms"].get<double>(), sorted[1]);
    EXPECT_NEAR(j["images_per_second"].get<double>(), 16 / (sorted[1] * 1e-3), 1e-6 * j["images_per_second"].get<double>());
    EXPECT_TRUE(std::isfinite(j["first_loss"].get<double>()));
    EXPECT_TRUE(std::isfinite(j["last_loss"].get<double>()));
    EXPECT_GT(j["planned_bytes"].get<double>(), 0);
    EXPECT_EQ(j["device_bytes"].get<double>(), 0);  // no device memory on the CPU
    EXPECT_EQ(j["input"], nlohmann::json({20, 20, 1}));
  }
  // --image-size: synthetic images of another side, which the line records (the model's own is 20).
  const Result sized = kiln(args + " --image-size 36");
  ASSERT_EQ(sized.rc, 0) << sized.output;
  expect_contains(sized, {"batch 16 at 36x36:"}, "--image-size 36");
  std::ifstream again(json);
  std::string last;
  for (std::string line; std::getline(again, line);) last = line;
  EXPECT_EQ(nlohmann::json::parse(last)["input"], nlohmann::json({36, 36, 1}));
  EXPECT_EQ(nlohmann::json::parse(last)["image_size"], 36);
  expect_rejected("bench --steps 0", {"--steps", "use e.g. --steps 20"});
  // A --json file that cannot be written stops both commands before any work.
  for (const std::string& command : {std::string("bench --device cpu"), "train --device cpu --data " + kNoData}) {
    const Result bad = kiln(command + " --json /nonexistent/kiln/out.jsonl");
    EXPECT_NE(bad.rc, 0) << bad.output;
    expect_contains(bad, {"--json file '/nonexistent/kiln/out.jsonl'", "folder exists"}, command);
    EXPECT_EQ(bad.output.find("kiln bench:"), std::string::npos) << bad.output;
  }
}

}  // namespace

namespace {

// --threads sizes the CPU kernels' pool (kiln/threads.h): below 1 it is refused where it is
// parsed, with a fix; --help shows the default (KILN_THREADS, as ctest sets it, or the cores
// available), and a malformed KILN_THREADS is an error naming the variable.
TEST(Cli, ThreadsBelowOneAreRejectedWithAFix) {
  for (const std::string bad : {"0", "-1"}) {
    expect_rejected("train --data " + kNoData + " --threads " + bad,
                    {"--threads", bad + " is out of range", ">= 1", "use e.g. --threads"});
    expect_rejected("bench --threads " + bad, {"--threads", ">= 1", "use e.g. --threads"});
  }
}

TEST(Cli, HelpShowsTheThreadsDefault) {
  const Result r = kiln("train --help");
  EXPECT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"--threads INT=" + std::to_string(kiln::threads()), "KILN_THREADS"}, "train --help");
}

TEST(Cli, MalformedThreadsVariableIsNamed) {
  for (const char* bad : {"0", "two"}) {
    kiln::testing::ScopedEnv env("KILN_THREADS", bad);
    const Result r = kiln("train --data " + kNoData);
    EXPECT_NE(r.rc, 0) << r.output;
    expect_contains(r, {"KILN_THREADS='" + std::string(bad) + "'", "from 1"}, "KILN_THREADS=" + std::string(bad));
    EXPECT_EQ(r.output.find("kiln: training"), std::string::npos) << r.output;
  }
}

}  // namespace

namespace {

// The loss-scaling rows (declared by the loss-scale family) reach the program: fp32 scales no loss
// unless --loss-scale dynamic asks, which starts at --loss-scale-init; with no overflow in an
// epoch of 16 steps (4,000 digits at batch 256) and the scale doubling only after 2000 clean steps
// (the default --loss-scale-interval), the epoch ends at the initial scale (its --json line's
// loss_scale); with an interval of 5 it grows.
TEST(KilnCli, LossScaleFlagsReachTheTraining) {
  const std::string dir = kiln::testing::shared_digits_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte")) GTEST_SKIP() << "no digits at " << dir;
  kiln::testing::TempDir tmp;
  auto loss_scale = [&](const std::string& flags, const std::string& name) {
    const std::string json = tmp.file(name + ".jsonl");
    const std::string args =
        "train --device cpu --model digits_cnn --data " + dir + " --epochs 1 --batch 256 --workers 1 --json " + json + flags;
    const Result r = kiln(args);
    EXPECT_EQ(r.rc, 0) << args << "\n" << r.output;
    std::ifstream in(json);
    std::string line;
    std::getline(in, line);
    return nlohmann::json::parse(line)["loss_scale"];
  };
  EXPECT_TRUE(loss_scale("", "auto").is_null());  // fp32: auto is off
  EXPECT_EQ(loss_scale(" --loss-scale dynamic --loss-scale-init 1024", "fixed").get<double>(), 1024);
  EXPECT_GT(loss_scale(" --loss-scale dynamic --loss-scale-init 1024 --loss-scale-interval 5", "grows").get<double>(),
            1024);
}

// `kiln train --json FILE`: one line per epoch with its wall time (training, evaluation), its
// training time, loss and accuracies, as the digits benchmark reads them.
TEST(KilnCli, TrainJsonHasOneLinePerEpoch) {
  const std::string dir = kiln::testing::shared_digits_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte")) GTEST_SKIP() << "no digits at " << dir;
  kiln::testing::TempDir tmp;
  const std::string json = tmp.file("epochs.jsonl");
  const std::string args =
      "train --device cpu --model digits_cnn --data " + dir + " --epochs 2 --batch 256 --workers 1 --json " + json;
  const Result r = kiln(args);
  ASSERT_EQ(r.rc, 0) << r.output;
  std::ifstream in(json);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  for (size_t i = 0; i < lines.size(); ++i) {
    const nlohmann::json& e = lines[i];
    EXPECT_EQ(e["epoch"].get<int>(), int(i) + 1);
    EXPECT_EQ(e["device"].get<std::string>(), "cpu");
    EXPECT_GE(e["wall_seconds"].get<double>(), e["train_seconds"].get<double>());  // evaluation on top
    EXPECT_GT(e["train_seconds"].get<double>(), 0);
    // The phases after the steps add up to no more than the epoch's wall time; without
    // --checkpoint nothing is written.
    EXPECT_GT(e["eval_seconds"].get<double>(), 0);
    EXPECT_GE(e["check_seconds"].get<double>(), 0);
    EXPECT_EQ(e["checkpoint_seconds"].get<double>(), 0);
    EXPECT_LE(e["train_seconds"].get<double>() + e["check_seconds"].get<double>() + e["eval_seconds"].get<double>(),
              e["wall_seconds"].get<double>());
    EXPECT_TRUE(std::isfinite(e["train_loss"].get<double>()));
    EXPECT_GT(e["test_accuracy"].get<double>(), 0.1);  // better than chance after an epoch
  }
  // The printed accuracy is the last line's.
  expect_contains(r, {fmt::format("test accuracy: {:.4f}", lines.back()["test_accuracy"].get<double>())}, args);
}

}  // namespace

namespace {

// --threads and KILN_THREADS share set_threads' cap (kiln::max_threads()): over it is refused before
// any thread starts, with the cap and a count to use, instead of std::system_error's abort.
TEST(Cli, ThreadsOverTheCapAreRejectedWithTheCap) {
  const std::string cap = std::to_string(kiln::max_threads());
  for (const std::string& bad : {std::to_string(kiln::max_threads() + 1), std::string("100000")}) {
    const Result r = kiln("train --data " + kNoData + " --threads " + bad);
    EXPECT_NE(r.rc, 134) << r.output;  // not std::system_error's abort
    expect_rejected("train --data " + kNoData + " --threads " + bad,
                    {"--threads", bad + " is out of range", "at most " + cap, "use e.g. --threads"});
    expect_rejected("bench --threads " + bad, {"--threads", "at most " + cap});
  }
  const std::string over = std::to_string(kiln::max_threads() + 1);
  kiln::testing::ScopedEnv env("KILN_THREADS", over.c_str());
  const Result r = kiln("train --data " + kNoData);
  EXPECT_EQ(r.rc, 2) << r.output;
  expect_contains(r, {"KILN_THREADS='" + over + "'", "from 1 to " + cap},
                  "KILN_THREADS over the cap");
  EXPECT_EQ(r.output.find("kiln: training"), std::string::npos) << r.output;
}

// `kiln --version`: the version, the commit and whether the CUDA backend is built, rc 0.
TEST(Cli, VersionFlagPrintsTheVersion) {
  const Result r = kiln("--version");
  EXPECT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"kiln ", "(commit ", "CUDA backend: "}, "--version");
  EXPECT_EQ(r.output.find("subcommand is required"), std::string::npos) << r.output;
}

// The plan says which ops leave their wgrad running beside the next op on the GPU (ResNet-18's
// CBR and conv + BN backward: 9 CBRs, 8 block-end convolutions and 3 projections), and none on the
// CPU, which runs ops one by one.
TEST(Cli, PlanCountsTheOpsWhoseWgradRunsBesideTheNext) {
  const std::string plan = "plan --model resnet18 --batch 2 --precision fp16";
  const Result gpu = kiln(plan + " --device cuda");
  ASSERT_EQ(gpu.rc, 0) << gpu.output;
  expect_contains(gpu, {"streams: 20 ops leave their wgrad on the side stream running beside the next op"},
                  plan + " --device cuda");
  const Result cpu = kiln("plan --model resnet18 --batch 2 --device cpu");
  ASSERT_EQ(cpu.rc, 0) << cpu.output;
  EXPECT_EQ(cpu.output.find("streams:"), std::string::npos) << cpu.output;
}

// Issue 47, item 9: `kiln --verison` and `kiln -V` were answered "A subcommand is required"; the
// top level now gets the "did you mean" the subcommands have.
TEST(Cli, AMistypedTopLevelOptionGetsTheNearestName) {
  for (const std::string word : {"--verison", "-V", "--versoin=1"}) {
    const Result r = kiln(word);
    EXPECT_NE(r.rc, 0) << r.output;
    expect_contains(r, {"unknown option '" + word.substr(0, word.find('=')) + "'", "did you mean '--version'?",
                        "plan, train"}, word);
    EXPECT_EQ(r.output.find("subcommand is required"), std::string::npos) << r.output;
  }
  const Result far = kiln("--frobnicate train");
  EXPECT_NE(far.rc, 0) << far.output;
  expect_contains(far, {"unknown option '--frobnicate'", "--help", "--version"}, "--frobnicate");
  EXPECT_EQ(far.output.find("did you mean"), std::string::npos) << far.output;
}

// The options a subcommand's --help lists, each by its long name with its type name ("INT",
// "N", "0|1", ...: what --help shows before ':' or '=').
std::vector<std::pair<std::string, std::string>> options_and_types(const std::string& subcommand) {
  const Result help = kiln(subcommand + " --help");
  std::vector<std::pair<std::string, std::string>> options;
  std::istringstream lines(help.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string names, shown;
    if (!(words >> names >> shown) || names.rfind("--", 0) != 0) continue;
    options.emplace_back(names.substr(0, names.find(',')), shown.substr(0, shown.find_first_of(":=")));
  }
  return options;
}

// Issue 47, item 9: a number past what an option's type holds got CLI11's "Could not convert:
// --batch = 99999999999". Every whole-number option of every subcommand (found from --help, so a
// new option is covered without a line here) now refuses it in kiln's words: the flag, the range,
// a fix; so do text that is not a number and a fraction where a whole number goes.
TEST(Cli, EveryWholeNumberOptionRefusesANumberPastItsRangeInKilnsWords) {
  size_t checked = 0;
  std::set<std::string> seen;  // an option several subcommands share (--batch, the CUDA ones) once
  auto has = [](const Result& r, const std::vector<std::string>& any) {
    return std::any_of(any.begin(), any.end(), [&](const std::string& s) { return r.output.find(s) != std::string::npos; });
  };
  for (const std::string sub : {"plan", "train", "bench", "data-bench", "eval", "pack", "export", "predict", "plot"}) {
    std::vector<std::string> flags;
    for (const auto& [flag, type] : options_and_types(sub)) {
      // Every one CLI11 calls INT; of those kiln names N (the CUDA options) or 0|1 (switches),
      // which go through the same place, one of each: there are some 90.
      if (type == "INT" && seen.insert(flag).second) flags.push_back(flag);
      if ((type == "N" || type == "0|1") && seen.insert(type).second) flags.push_back(flag);
    }
    for (const std::string& flag : flags) {
      const std::string args = sub + " " + flag + " 99999999999";
      const Result r = kiln(args);
      EXPECT_NE(r.rc, 0) << args << "\n" << r.output;
      EXPECT_TRUE(has(r, {flag + ": 99999999999 is out of range: it must be ", flag + ": 99999999999 is not one of "}))
          << args << "\n" << r.output;
      // The range in words: a count's bounds, or a switch's "must be 0 or 1".
      EXPECT_TRUE(has(r, {"2147483647", " to ", "in [", "at most", "one of", "must be 0 or 1"}))
          << args << ": no range\n" << r.output;
      EXPECT_TRUE(has(r, {"; use ", "--help says", "--help lists"})) << args << ": no fix\n" << r.output;
      EXPECT_EQ(r.output.find("Could not convert"), std::string::npos) << args << "\n" << r.output;
      EXPECT_EQ(r.output.find("not in range"), std::string::npos) << args << "\n" << r.output;
      ++checked;
    }
  }
  EXPECT_GE(checked, 20u) << "--help lists the options as 'NAME INT...'";
  const std::string train = "train --data " + kNoData + " ";
  expect_rejected(train + "--batch 99999999999",
                  {"--batch: 99999999999 is out of range: it must be >= 1 and at most 2147483647 (a 32-bit whole "
                   "number); use e.g. --batch 64"});
  expect_rejected(train + "--classes -99999999999", {"--classes: -99999999999 is out of range", "-1 or >= 1"});
  expect_rejected(train + "--channels 2", {"--channels: 2 is not one of 1, 3; use e.g. --channels 3 (the default)"});
  expect_rejected(train + "--rank-timeout 1e400",
                  {"--rank-timeout: 1e400 is out of range: it must be >= 0, and a finite float"});
  expect_rejected(train + "--image-size 5000",
                  {"--image-size: 5000 is out of range: it must be from 1 to 4096; use e.g. --image-size 224 (the "
                   "default)"});
  expect_rejected(train + "--epochs ten", {"--epochs: 'ten' is not a number: it must be >= 1", "--epochs 10"});
  expect_rejected(train + "--epochs 1.5", {"--epochs: 1.5 is not a whole number: it must be >= 1"});
}

// Issue 47, item 9: `--checkpoint runs` naming a folder was answered "already exists ... use
// --resume or --overwrite", neither of which helps. It is refused at once, with any of them, saying
// it is a folder and what to pass.
TEST(Cli, ACheckpointThatIsAFolderIsRefusedAtOnce) {
  kiln::testing::TempDir tmp;
  const std::string runs = tmp.file("runs");
  std::filesystem::create_directories(runs);
  for (const std::string extra : {"", " --resume", " --overwrite"}) {
    const std::string args = "train --device cpu --data " + kNoData + " --checkpoint " + runs + extra;
    const Result r = kiln(args);
    EXPECT_EQ(r.rc, 2) << r.output;
    expect_contains(r, {"checkpoint '" + runs + "' is a folder",
                        "pass a file path, e.g. '" + runs + "/run.safetensors'"}, args);
    EXPECT_EQ(r.output.find("already exists"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("dataset directory"), std::string::npos) << "refused before the data:\n" << r.output;
  }
}

// Issue 47, item 9: `--workers 100000` started 100000 loader threads. Above kiln::max_threads()
// (--threads' cap: 4 x the cores, at least 64) the count is capped, saying so, and the run trains.
TEST(KilnCli, LoaderWorkersAreCappedAndSaySo) {
  const std::string dir = kiln::testing::shared_digits_dir();
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte")) GTEST_SKIP() << "no digits at " << dir;
  kiln::testing::TempDir tmp;
  kiln::testing::write_first_digits(dir, tmp.file("digits"), 256, 64);
  const std::string cap = std::to_string(kiln::max_threads());
  const std::string args = "train --device cpu --model digits_cnn --data " + tmp.file("digits") +
                           " --epochs 1 --batch 32 --workers 100000";
  const Result r = kiln(args);
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"kiln: --workers 100000 capped to " + cap + ": more loader threads than 4 x the",
                      ", " + cap + " loader threads"}, args);
  EXPECT_EQ(r.output.find("100000 loader threads"), std::string::npos) << r.output;
}

}  // namespace

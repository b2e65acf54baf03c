// The flags of the rows of tools/cli/common_settings.cpp (--model, --device, --classes) and
// tools/cli/data_parallel_settings.cpp (--gpus, --nodes, --node-rank, --master, --join-timeout,
// --rank-timeout): the commands that had them have them, with their defaults; their refusals name
// the flag, the value and a fix before any work (the data, which does not exist, is never looked
// at); kiln settings lists them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/kiln_cli.h"

namespace kiln {
namespace {

using testing::expect_contains;
using testing::kiln;
using testing::Result;

const std::string kNoData = "train --epochs 1 --data /nonexistent/kiln_data ";

bool has(const Result& r, const std::string& part) { return r.output.find(part) != std::string::npos; }

// Refused on the command line, before anything is compiled or any data is looked for.
void expect_refused(const std::string& args, const std::vector<std::string>& parts) {
  const Result r = kiln(args);
  EXPECT_NE(r.rc, 0) << args << "\n" << r.output;
  expect_contains(r, parts, args);
  EXPECT_FALSE(has(r, "/nonexistent/kiln_data")) << args << ": refused after looking for the data\n" << r.output;
  EXPECT_FALSE(has(r, "program:")) << args << ": refused after compiling\n" << r.output;
}

TEST(CommonSettingsCli, ModelDeviceAndClassesRefuseInTheirOwnWords) {
  for (const std::string& command : {kNoData, std::string("plan "), std::string("bench --steps 1 ")}) {
    expect_refused(command + "--device tpu",
                   {"--device: 'tpu' is not a device: it takes auto, cpu, cuda or cuda:N (N the GPU's number); use "
                    "e.g. --device cpu, or auto (the default)"});
    expect_refused(command + "--device cuda:x", {"--device: 'cuda:x' is not a device"});
    expect_refused(command + "--classes 0",
                   {"--classes: 0 is out of range: it must be -1 or >= 1; use e.g. --classes 10, or -1 for the "
                    "model's (plan) or the dataset's (train) count"});
    expect_refused(command + "--classes -2", {"--classes: -2 is out of range: it must be -1 or >= 1; use e.g."});
    expect_refused(command + "--classes ten", {"--classes: 'ten' is not a number: it must be -1 or >= 1; use e.g."});
    expect_refused(command + "-m resnet1000",
                   {"--model: 'resnet1000' is not one of alexnet, ",
                    "densenet121, densenet161, densenet169, densenet201, digits_cnn, ",
                    "mnasnet0_5, mnasnet0_75, mnasnet1_0, mnasnet1_3, mobilenet_v2, ", "vgg16_bn",
                    "; use e.g. --model resnet50, or digits_cnn (the default)"});
  }
}

TEST(CommonSettingsCli, TheValuesTheyTakeReachThePlan) {
  // The model named, on the device named, with the class count given: its last layer's width; -1
  // (the default) is the model's own (digits_cnn: 10).
  const Result seven = kiln("plan --device cpu -m resnet18_cifar --classes 7");
  ASSERT_EQ(seven.rc, 0) << seven.output;
  expect_contains(seven, {"device cpu", "fc              fc ", "[64,7]"}, "plan resnet18_cifar --classes 7");
  const Result own = kiln("plan --device cpu --model digits_cnn --classes -1");
  ASSERT_EQ(own.rc, 0) << own.output;
  expect_contains(own, {"device cpu", "fc2", "[64,10]"}, "plan digits_cnn --classes -1");
}

TEST(DataParallelSettingsCli, LaunchFlagsRefuseInTheirOwnWords) {
  for (const std::string& command : {kNoData, std::string("bench --steps 1 ")}) {
    expect_refused(command + "--gpus x",
                   {"--gpus: --gpus 'x': 'x' is not a GPU ordinal; give a count (--gpus 2: GPUs 0 and 1) or ordinals "
                    "(--gpus 0,2)"});
    expect_refused(command + "--gpus 0,0", {"--gpus '0,0' names GPU 0 twice"});
    expect_refused(command + "--master nohost",
                   {"--master: --master 'nohost' has no port; give HOST:PORT, e.g. --master 10.0.0.1:29500"});
    expect_refused(command + "--nodes 0", {"--nodes: 0 is out of range: it must be >= 1; use e.g. --nodes 2"});
    expect_refused(command + "--node-rank -1",
                   {"--node-rank: -1 is out of range: it must be >= 0; use e.g. --node-rank 0"});
    expect_refused(command + "--join-timeout 0",
                   {"--join-timeout: 0 is out of range: it must be > 0; use e.g. --join-timeout 300"});
  }
  expect_refused(kNoData + "--rank-timeout -1",
                 {"--rank-timeout: -1 is out of range: it must be >= 0; use e.g. --rank-timeout 600"});
  // The watchdog is training's: bench has no --rank-timeout.
  expect_refused("bench --steps 1 --rank-timeout 5", {"unknown option '--rank-timeout'"});
}

TEST(DataParallelSettingsCli, HelpKeepsTheFlagsAndTheirDefaults) {
  for (const std::string command : {"train", "bench"}) {
    const Result help = kiln(command + " --help");
    ASSERT_EQ(help.rc, 0) << help.output;
    expect_contains(help,
                    {"--gpus N|LIST ", "--nodes INT=1 ", "--node-rank INT=0 ", "--master HOST:PORT ",
                     "--join-timeout FLOAT=300 ", "-m,--model TEXT=digits_cnn ", "--device TEXT=auto ",
                     "--classes INT=-1 "},
                    command + " --help");
    EXPECT_EQ(has(help, "--rank-timeout FLOAT=600 "), command == "train") << help.output;
  }
}

TEST(CommonSettingsCli, KilnSettingsListsTheRows) {
  const Result r = kiln("settings");
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_contains(
      r,
      {"| `--model`, `-m` | `CommonOptions::model` |  | alexnet, ",
       "densenet121, densenet161, densenet169, densenet201, digits_cnn, ",
       "mnasnet0_5, mnasnet0_75, mnasnet1_0, mnasnet1_3, mobilenet_v2, ",
       "| `--device` | `CommonOptions::device` |  | auto, cpu, cuda, cuda:N | `auto` |",
       "| `--classes` | `CommonOptions::classes` |  | -1 or >= 1 | `-1` |",
       "| `--gpus` | `DataParallelArgs::gpus` |  | a count N, or ordinals a,b,... |  |",
       "| `--nodes` | `DataParallelArgs::nodes` |  | >= 1 | `1` |",
       "| `--node-rank` | `DataParallelArgs::node_rank` |  | >= 0 | `0` |",
       "| `--master` | `DataParallelArgs::master` |  | HOST:PORT |  |",
       "| `--join-timeout` | `DataParallelArgs::join_timeout` |  | > 0 | `300` |",
       "| `--rank-timeout` | `TrainOptions::rank_timeout` |  | >= 0 | `600` |"},
      "settings");
}

}  // namespace
}  // namespace kiln

// The data flags made from the rows of tools/cli/data_settings.cpp that once were hand-written
// (--decode, --skip-bad, --channels, --exif-orientation, --crop-scale, --crop-ratio, --hflip): their
// refusals name the flag, the value and a fix before any data is read; the commands that train
// have the training flags and eval does not; --help keeps their groups; kiln settings lists them;
// kiln eval takes the data settings a checkpoint records unless its command line gives them.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli/messy_folders.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::Result;
using testing::TempDir;
using testing::messy::kiln;
using testing::messy::small_pngs;
using testing::messy::train_args;

const std::string kNoData = "train --device cpu --epochs 1 --data /nonexistent/kiln_data ";

bool has(const Result& r, const std::string& part) { return r.output.find(part) != std::string::npos; }

// A refusal of the command line, before the data (which does not exist) is looked at.
void expect_refused(const std::string& args, const std::vector<std::string>& parts) {
  const Result r = kiln(args);
  EXPECT_NE(r.rc, 0) << args << "\n" << r.output;
  testing::expect_contains(r, parts, args);
  EXPECT_FALSE(has(r, "/nonexistent/kiln_data")) << args << ": refused after looking for the data\n" << r.output;
}

TEST(DataSettingsCli, ACropRangeMustBeTwoNumbersInOrderWithinItsBounds) {
  for (const std::string flag : {"--crop-scale", "--crop-ratio"}) {
    const std::string use = "; use e.g. " + flag + " ";
    expect_refused(kNoData + flag + " 1.0",
                   {flag + ": '1.0' is not a range: it takes two numbers, MIN,MAX" + use});
    expect_refused(kNoData + flag + " 0.5,x", {flag + ": '0.5,x' is not a range: it takes two numbers, MIN,MAX" + use});
    expect_refused(kNoData + flag + " 1,2,3", {flag + ": '1,2,3' is not a range"});
    expect_refused(kNoData + flag + " 0.9,0.5", {flag + ": 0.9,0.5 is not a range: its MIN is above its MAX" + use});
    expect_refused(kNoData + flag + " 0,1", {flag + ": 0,1 is out of range: MIN and MAX must each be "});
  }
  expect_refused(kNoData + "--crop-scale 0.5,1.5",
                 {"--crop-scale: 0.5,1.5 is out of range: MIN and MAX must each be in (0, 1]; use e.g. --crop-scale "
                  "0.08,1 (the default)"});
  expect_refused(kNoData + "--crop-ratio -1,2", {"--crop-ratio: -1,2 is out of range: MIN and MAX must each be > 0"});
  // In range, in order, equal ends: taken (the run then stops at the missing data).
  for (const std::string ok : {"--crop-scale 0.5,0.5", "--crop-ratio 0.5,4", "--crop-scale 1,1"}) {
    const Result r = kiln(kNoData + ok);
    EXPECT_EQ(r.rc, 2) << ok << "\n" << r.output;
    testing::expect_contains(r, {"dataset directory '/nonexistent/kiln_data' does not exist"}, ok);
  }
}

TEST(DataSettingsCli, TheOtherDataFlagsRefuseInTheirOwnWords) {
  expect_refused(kNoData + "--decode tpu",
                 {"--decode: 'tpu' is not one of cpu, gpu, auto; use e.g. --decode cpu, or auto (the default)"});
  expect_refused(kNoData + "--channels 2", {"--channels: 2 is not one of 1, 3; use e.g. --channels 3 (the default)"});
  expect_refused(kNoData + "--channels x", {"--channels: x is not one of 1, 3"});
  // Flags alone: no value and no --no- form.
  for (const std::string bad : {"--no-skip-bad", "--no-exif-orientation"}) {
    const Result r = kiln(kNoData + bad);
    EXPECT_NE(r.rc, 0) << bad << "\n" << r.output;
    EXPECT_FALSE(has(r, "/nonexistent/kiln_data")) << bad << "\n" << r.output;
  }
}

// The help of a command, from `start` (a group's title) to the next blank line.
std::string help_group(const std::string& command, const std::string& start) {
  const Result r = kiln(command + " --help");
  EXPECT_EQ(r.rc, 0) << r.output;
  const size_t at = r.output.find(start);
  if (at == std::string::npos) return "";
  return r.output.substr(at, r.output.find("\n\n", at) - at);
}

TEST(DataSettingsCli, TheCommandsThatTrainHaveTheTrainingFlagsInTheirGroups) {
  for (const std::string command : {"train", "data-bench", "eval"}) {
    const bool training = command != "eval";
    const std::string data = help_group(command, "Data:"), images = help_group(command, "Image files");
    for (const std::string flag : {"--skip-bad"}) EXPECT_TRUE(data.find(flag) != std::string::npos) << command;
    for (const std::string flag : {"--channels INT:{1,3}=3", "--exif-orientation", "--transform"})
      EXPECT_TRUE(images.find(flag) != std::string::npos) << command << ": " << flag << " in\n" << images;
    for (const std::string flag : {"--decode cpu|gpu|auto=auto", "--hflip,--no-hflip{false}", "--crop-pad"})
      EXPECT_EQ(data.find(flag) != std::string::npos, training) << command << ": " << flag << " in\n" << data;
    for (const std::string flag : {"--crop-scale MIN,MAX=0.08,1", "--crop-ratio MIN,MAX=0.75,1.3333333333333333"})
      EXPECT_EQ(images.find(flag) != std::string::npos, training) << command << ": " << flag << " in\n" << images;
  }
  const Result eval = kiln("eval --checkpoint /nonexistent/c.safetensors --crop-scale 0.5,1");
  EXPECT_NE(eval.rc, 0) << eval.output;
  testing::expect_contains(eval, {"--crop-scale"}, "eval --crop-scale");
}

TEST(DataSettingsCli, KilnSettingsListsEveryDataFlag) {
  const Result r = kiln("settings");
  ASSERT_EQ(r.rc, 0) << r.output;
  for (const std::string line :
       {"| `--format` | `DataArgs::format` |  | auto, idx, cifar10, packed, imagefolder | `auto` | must match |  |",
        "| `--decode` | `TrainOptions::decode` |  | cpu, gpu, auto | `auto` |  |  | who decodes training JPEGs",
        "| `--skip-bad` | `DataOptions::skip_bad` |  | a flag | `0` |  |  | image files that cannot be decoded",
        "| `--channels` | `DataArgs::channels` |  | 1, 3 | `3` | must match |  | 3: RGB; 1: grayscale",
        "| `--exif-orientation` | `DataArgs::exif_orientation` |  | a flag | `0` | must match |  | rotate JPEGs",
        "| `--crop-scale` | `DataArgs::crop_scale` |  | MIN,MAX with MIN <= MAX, each in (0, 1] | `0.08,1` | must match |",
        "| `--crop-ratio` | `DataArgs::crop_ratio` |  | MIN,MAX with MIN <= MAX, each > 0 | `0.75,1.3333333333333333` | "
        "must match |",
        "| `--hflip`, `--no-hflip` | `TrainOptions::augment.hflip` |  | a flag | `auto` | must match |  | random "
        "horizontal flips"})
    EXPECT_TRUE(has(r, line)) << line << "\nin:\n" << r.output;
}

// What the checkpoint records of how its images became samples is what kiln eval uses, unless
// the command line says otherwise (the data then no longer fits the model, and eval says so).
TEST(DataSettingsCli, EvalTakesTheCheckpointsDataSettingsUnlessGiven) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  const std::string ckpt = dir.file("c.safetensors");
  const Result trained = kiln(train_args(data) + " --transform imagenet --image-size 16 --eval-resize 18 "
                              "--channels 1 --exif-orientation --checkpoint " + ckpt);
  ASSERT_EQ(trained.rc, 0) << trained.output;
  const Result eval = kiln("eval --device cpu --json --checkpoint " + ckpt);
  ASSERT_EQ(eval.rc, 0) << eval.output;
  testing::expect_contains(eval, {"\"input\":[16,16,1]"}, "eval without data flags");
  const Result three = kiln("eval --device cpu --checkpoint " + ckpt + " --channels 3");
  EXPECT_NE(three.rc, 0) << three.output;
  testing::expect_contains(three, {"3 channels against 1"}, "eval --channels 3");
  const Result sized = kiln("eval --device cpu --checkpoint " + ckpt + " --image-size 12");
  EXPECT_NE(sized.rc, 0) << sized.output;
  testing::expect_contains(sized, {"image size 12x12 against 16x16"}, "eval --image-size 12");
}

}  // namespace
}  // namespace kiln

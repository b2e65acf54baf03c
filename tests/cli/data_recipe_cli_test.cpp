// The checkpoint recipe's data half (cli/data_recipe.h): an image-folder run records how its files
// became samples under the keys and in the texts checkpoints have always held them, resumes with
// the same settings, and a resume that changes one is refused naming the data setting and the flag
// that gives the checkpoint's value back, before anything is compiled.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "cli/messy_folders.h"
#include "kiln/safetensors.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::Result;
using testing::TempDir;
using testing::messy::kiln;
using testing::messy::small_pngs;
using testing::messy::train_args;

// The imagenet transform at a small size, so that every imagenet-only setting is recorded.
std::string imagenet_args(const fs::path& data, int epochs, const std::string& ckpt) {
  return train_args(data, epochs) + " --transform imagenet --image-size 16 --eval-resize 18 --checkpoint " + ckpt;
}

TEST(DataRecipeCli, AnImageFolderRunRecordsItsDataSettingsAsBefore) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  const std::string ckpt = dir.file("c.safetensors");
  const Result r = kiln(imagenet_args(data, 1, ckpt));
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto meta = load_safetensors(ckpt).metadata;
  // The texts checkpoints of earlier versions hold: a change here stops them resuming.
  const std::map<std::string, std::string> expected = {
      {"data_format", "imagefolder"}, {"transform", "imagenet"},   {"image_size", "16"},
      {"eval_resize", "18"},          {"normalize", "auto"},       {"channels", "3"},
      {"crop_scale", "0.08,1"},       {"crop_ratio", "0.75,1.3333333333333333"},
      {"exif_orientation", "false"},  {"crop_pad", "0"}};
  for (const auto& [key, value] : expected) EXPECT_EQ(meta.at("recipe." + key), value) << key;
  const Result resumed = kiln(imagenet_args(data, 2, ckpt) + " --resume");
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  testing::expect_contains(resumed, {"resumed from", "epoch 2/2"}, "--resume");
}

TEST(DataRecipeCli, AResumeWithOtherDataSettingsNamesTheirFlags) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  const std::string ckpt = dir.file("c.safetensors");
  ASSERT_EQ(kiln(imagenet_args(data, 1, ckpt)).rc, 0);
  const Result sized = kiln(imagenet_args(data, 2, ckpt) + " --image-size 12 --normalize dataset --resume");
  EXPECT_NE(sized.rc, 0) << sized.output;
  testing::expect_contains(sized,
                           {"cannot resume from checkpoint",
                            "image_size: 16 in the checkpoint, 12 in this run; resume with --image-size 16 "
                            "(DataOptions::transform.size)",
                            "normalize: auto in the checkpoint, dataset in this run; resume with --normalize auto"},
                           "a changed --image-size and --normalize");
  const Result plain = kiln(train_args(data, 2) + " --transform plain --checkpoint " + ckpt + " --resume");
  EXPECT_NE(plain.rc, 0) << plain.output;
  testing::expect_contains(plain, {"transform: imagenet in the checkpoint, plain in this run; resume with "
                                   "--transform imagenet (DataOptions::transform.kind)"},
                           "a changed --transform");
  const Result flipped = kiln(imagenet_args(data, 2, ckpt) + " --exif-orientation --crop-scale 0.5,1 --resume");
  EXPECT_NE(flipped.rc, 0) << flipped.output;
  testing::expect_contains(flipped, {"exif_orientation: false in the checkpoint, true in this run; resume with no "
                                     "--exif-orientation (DataArgs::exif_orientation)",
                                     "crop_scale: 0.08,1 in the checkpoint, 0.5,1 in this run; resume with "
                                     "--crop-scale 0.08,1 (DataArgs::crop_scale)"},
                           "--exif-orientation and --crop-scale");
}

// --channels, a resume of another is refused before compiling, naming the flag; the same run with
// every data flag spelled out at the values the checkpoint records resumes, and a crop ratio that
// is only near the recorded one is another.
TEST(DataRecipeCli, AResumeMustHaveTheCheckpointsChannelsAndCropRanges) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  const std::string ckpt = dir.file("c.safetensors");
  ASSERT_EQ(kiln(imagenet_args(data, 1, ckpt)).rc, 0);
  const Result gray = kiln(imagenet_args(data, 2, ckpt) + " --channels 1 --resume");
  EXPECT_NE(gray.rc, 0) << gray.output;
  testing::expect_contains(gray, {"cannot resume from checkpoint", "channels: 3 in the checkpoint, 1 in this run; "
                                  "resume with --channels 3 (DataArgs::channels)"},
                           "--channels 1");
  EXPECT_EQ(gray.output.find("epoch 2/2"), std::string::npos) << gray.output;
  const Result near = kiln(imagenet_args(data, 2, ckpt) + " --crop-ratio 0.75,1.3333 --resume");
  EXPECT_NE(near.rc, 0) << near.output;
  testing::expect_contains(near, {"crop_ratio: 0.75,1.3333333333333333 in the checkpoint, 0.75,1.3333 in this run; "
                                  "resume with --crop-ratio 0.75,1.3333333333333333 (DataArgs::crop_ratio)"},
                           "--crop-ratio 0.75,1.3333");
  const std::string same = " --format imagefolder --normalize auto --channels 3 --crop-scale 0.08,1 --crop-ratio "
                           "0.75,1.3333333333333333 --hflip --decode cpu --skip-bad --dct-scaling 1 --resume";
  const Result resumed = kiln(imagenet_args(data, 2, ckpt) + same);
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  testing::expect_contains(resumed, {"resumed from", "epoch 2/2"}, same);
}

// --hflip's row is the training half's key (the flips the run made, "auto" resolved): a resume
// that turns them off is refused with the flag that turns them on again.
TEST(DataRecipeCli, AResumeWithoutTheCheckpointsFlipsNamesHflip) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  const std::string ckpt = dir.file("c.safetensors");
  ASSERT_EQ(kiln(imagenet_args(data, 1, ckpt)).rc, 0);
  EXPECT_EQ(load_safetensors(ckpt).metadata.at("recipe.hflip"), "true");
  const Result off = kiln(imagenet_args(data, 2, ckpt) + " --no-hflip --resume");
  EXPECT_NE(off.rc, 0) << off.output;
  testing::expect_contains(off, {"hflip: true in the checkpoint, false in this run; resume with --hflip"},
                           "--no-hflip");
}

}  // namespace
}  // namespace kiln

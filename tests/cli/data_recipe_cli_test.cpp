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
                                     "--exif-orientation", "crop_scale: 0.08,1 in the checkpoint, 0.5,1 in this run; "
                                     "resume with --crop-scale 0.08,1"},
                           "the data flags that are no rows");
}

}  // namespace
}  // namespace kiln

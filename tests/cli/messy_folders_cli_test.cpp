// Image folders as users leave them, through the command line (issue 47): a link that loops is
// refused naming it (kiln train and kiln pack), two loops do not hang, a file reached by two paths
// is named, a truncated validation file is named before the first step (or left out up front with
// --skip-bad), and a folder of small images trains at their own size by default. Every kiln run
// here has a time limit (messy_folders.h): a scan that loops fails the test.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/messy_folders.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::Result;
using testing::TempDir;
using testing::messy::kiln;
using testing::messy::kiln_within;
using testing::messy::put;
using testing::messy::small_pngs;
using testing::messy::train_args;

TEST(MessyFoldersCli, ALinkBackUpIsRefusedNamingTheLinkAndItsTarget) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  fs::create_directory_symlink("..", data / "train" / "c1" / "loop");
  const std::string args = train_args(data);
  const Result r = kiln(args);
  EXPECT_NE(r.rc, 0) << r.output;
  testing::expect_contains(r, {"image folder loop", (data / "train" / "c1" / "loop").string(), "a link to '..'",
                               "remove the link"}, args);
}

// Two loops: os.walk's way branches at every level and never ends.
TEST(MessyFoldersCli, TwoLoopsAreRefusedWithoutHanging) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  fs::create_directory_symlink("../..", data / "train" / "c0" / "up");
  fs::create_directory_symlink("..", data / "train" / "c1" / "loop");
  const std::string args = train_args(data);
  const Result r = kiln_within(60, args);
  EXPECT_NE(r.rc, 0) << r.output;
  testing::expect_contains(r, {"image folder loop", (data / "train" / "c0" / "up").string(), "'../..'"}, args);
}

TEST(MessyFoldersCli, PackRefusesALoop) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  fs::create_directory_symlink("..", data / "train" / "c1" / "loop");
  const std::string args = "pack " + data.string() + " " + dir.file("packed") + " --workers 1";
  const Result r = kiln(args);
  EXPECT_NE(r.rc, 0) << r.output;
  testing::expect_contains(r, {"image folder loop", (data / "train" / "c1" / "loop").string()}, args);
  EXPECT_FALSE(fs::exists(dir.path() / "packed"));
}

TEST(MessyFoldersCli, AFileReachedByTwoPathsIsNamedWithBoth) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  fs::create_symlink("../c0/1.png", data / "train" / "c1" / "extra.png");
  for (const std::string& args : {train_args(data), "pack " + data.string() + " " + dir.file("packed")}) {
    const Result r = kiln(args);
    EXPECT_NE(r.rc, 0) << r.output;
    testing::expect_contains(
        r,
        {fmt::format("'{}' is the same file as '{}'", (data / "train" / "c1" / "extra.png").string(),
                     (data / "train" / "c0" / "1.png").string()),
         "count twice"},
        args);
  }
}

TEST(MessyFoldersCli, ATruncatedValidationFileIsNamedBeforeTheFirstStep) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  const std::vector<uint8_t> p = testing::picture(64, 64, 3, 7);
  std::vector<uint8_t> jpeg = encode_jpeg(p.data(), 64, 64, 3);
  jpeg.resize(jpeg.size() / 2);
  put(data / "val" / "c1" / "cut.jpg", jpeg);
  const std::string args = train_args(data) + " --checkpoint " + dir.file("c.safetensors");
  const Result r = kiln(args);
  EXPECT_NE(r.rc, 0) << r.output;
  testing::expect_contains(r, {"1 of the 17 image files cannot be used, found before the first batch",
                               (data / "val" / "c1" / "cut.jpg").string(), "Premature end of JPEG file",
                               "--skip-bad"}, args);
  EXPECT_EQ(r.output.find("epoch 1/1"), std::string::npos) << r.output;  // no step was taken
  // --skip-bad: left out before training, said then and listed at the end.
  const Result skip = kiln(args + " --skip-bad --overwrite");
  ASSERT_EQ(skip.rc, 0) << skip.output;
  testing::expect_contains(skip, {"--skip-bad: left out 1 of the 17 image files", "8 train / 8 test images",
                                  "skipped 1 unreadable sample", "cut.jpg", "test accuracy: "}, args);
}

// 20x20 images: the imagenet default would train on 224x224 crops upsampled 11 times (and diverge
// at the default learning rate); kiln takes them as they are and says so. Named, imagenet is taken
// without a word. (small_images_recipe_cli_test.cpp: the checkpoint records the transform used.)
TEST(MessyFoldersCli, SmallImagesTrainAtTheirOwnSizeByDefault) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  const std::string args = train_args(data);
  const Result r = kiln(args);
  ASSERT_EQ(r.rc, 0) << r.output;
  testing::expect_contains(r, {"is 20x20, smaller than --image-size 224", "--transform plain", "--transform imagenet",
                               "8 train / 8 test images, 20x20x3"}, args);
  const Result named = kiln(train_args(data) + " --transform imagenet --image-size 32 --eval-resize 36");
  ASSERT_EQ(named.rc, 0) << named.output;
  testing::expect_contains(named, {"32x32x3"}, "--transform imagenet");
  EXPECT_EQ(named.output.find("--transform plain"), std::string::npos) << named.output;
}

}  // namespace
}  // namespace kiln

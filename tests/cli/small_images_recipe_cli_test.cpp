// --transform auto's choice is what the checkpoint records (recipe.transform, and the flips that
// follow it): kiln eval and a resumed run take the transform the run used, not "auto" again.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/messy_folders.h"
#include "kiln/checkpoint.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::Result;
using testing::TempDir;
using testing::messy::kiln;
using testing::messy::small_pngs;
using testing::messy::train_args;

TEST(MessyFoldersCli, TheCheckpointRecordsTheTransformChosenForSmallImages) {
  TempDir dir;
  const fs::path data = small_pngs(dir.path() / "data");
  const std::string ckpt = dir.file("c.safetensors");
  const Result r = kiln(train_args(data) + " --checkpoint " + ckpt);
  ASSERT_EQ(r.rc, 0) << r.output;
  const auto meta = load_safetensors(ckpt).metadata;
  EXPECT_EQ(meta.at("recipe.transform"), "plain");
  EXPECT_EQ(meta.at("recipe.hflip"), "false");
  EXPECT_EQ(meta.count("recipe.image_size"), 0u);  // an imagenet-only setting
  const Result eval = kiln("eval --checkpoint " + ckpt + " --data " + data.string());
  ASSERT_EQ(eval.rc, 0) << eval.output;
  const Result resumed = kiln(train_args(data, 2) + " --checkpoint " + ckpt + " --resume");
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  testing::expect_contains(resumed, {"resumed from", "epoch 2/2"}, "--resume");
}

}  // namespace
}  // namespace kiln

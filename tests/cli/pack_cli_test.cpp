// kiln pack through the command line, as a user meets a bad image: a truncated JPEG is refused
// when packing, naming the file (kiln 1540906 packed it, and training then failed on "record N of
// a shard" that the user could neither re-encode nor remove); --skip-bad packs the rest and lists
// it; a record damaged after packing is named with its source file when training and evaluating.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "data/image/image_codec.h"
#include "data/pack/pack_writer.h"
#include "support/kiln_cli.h"
#include "support/temp_dir.h"
#include "support/test_pictures.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::expect_contains;
using testing::kiln;
using testing::read_bytes;
using testing::Result;
using testing::TempDir;
using testing::write_bytes;

// train/{a,b}/img_{0,1,2}.jpg and val/{a,b}/v0.jpg, 16x16 JPEGs (kept as they are in a pack).
std::string make_folder(const TempDir& dir) {
  const fs::path root = dir.path() / "photos";
  uint32_t seed = 1;
  auto put = [&](const fs::path& file) {
    fs::create_directories(file.parent_path());
    const std::vector<uint8_t> p = testing::picture(16, 16, 3, seed++);
    write_bytes(file.string(), encode_jpeg(p.data(), 16, 16, 3));
  };
  for (const char* c : {"a", "b"}) {
    for (int i = 0; i < 3; ++i) put(root / "train" / c / fmt::format("img_{}.jpg", i));
    put(root / "val" / c / "v0.jpg");
  }
  return root.string();
}

void truncate_to_half(const std::string& file) {
  std::vector<uint8_t> bytes = read_bytes(file);
  bytes.resize(bytes.size() / 2);
  write_bytes(file, bytes);
}

// Flips a byte in the middle of record `i` of `split`, in its shard (the index stays intact).
void damage_record(const std::string& pack, const std::string& split, int i) {
  const std::vector<uint8_t> index = read_bytes(pack + "/" + split + ".kpi");
  const uint8_t* e = index.data() + pack_format::kIndexHeaderBytes + i * pack_format::kIndexEntryBytes;
  const std::string shard = pack + "/" + pack_format::shard_name(split, int(pack_format::load_u32(e)));
  std::vector<uint8_t> bytes = read_bytes(shard);
  bytes.at(pack_format::load_u64(e + 4) + pack_format::load_u32(e + 12) / 2) ^= 0x10;
  write_bytes(shard, bytes);
}

TEST(PackCli, ATruncatedJpegIsRefusedNamingItsSourceFile) {
  TempDir dir;
  const std::string src = make_folder(dir);
  const std::string bad = src + "/train/b/img_1.jpg";
  truncate_to_half(bad);
  const std::string out = dir.file("photos.kiln");
  const std::string args = "pack " + src + " " + out + " --workers 2";
  const Result r = kiln(args);
  EXPECT_EQ(r.rc, 2) << r.output;
  expect_contains(r, {"truncated or corrupt JPEG '" + bad + "'", "--skip-bad leaves out the images it cannot decode"},
                  args);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".partial"));
}

TEST(PackCli, SkipBadPacksTheRestAndListsTheBadFile) {
  TempDir dir;
  const std::string src = make_folder(dir);
  truncate_to_half(src + "/train/b/img_1.jpg");
  const std::string out = dir.file("photos.kiln");
  const std::string args = "pack " + src + " " + out + " --workers 2 --skip-bad";
  const Result r = kiln(args);
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"7 images (5 training, 2 validation)", "left out 1 image that cannot be decoded (--skip-bad)",
                      "  train/b/img_1.jpg: truncated or corrupt JPEG"}, args);
  // The pack reads as 5 training samples of both classes.
  const Result bench = kiln("data-bench --data " + out + " --transform plain --batch 2 --batches 2 --workers 1");
  ASSERT_EQ(bench.rc, 0) << bench.output;
  expect_contains(bench, {"packed, train split: 5 samples, 2 classes"}, "data-bench on the pack");
}

// Bytes changed after packing (a bad copy, a bad disk): training and evaluation name the record,
// its source file and the fix.
TEST(PackCli, ADamagedRecordIsNamedWithItsSourceFileByTrainAndEval) {
  TempDir dir;
  const std::string src = make_folder(dir);
  const std::string pack = dir.file("photos.kiln");
  ASSERT_EQ(kiln("pack " + src + " " + pack + " --workers 2").rc, 0);
  const std::string ckpt = dir.file("photos.safetensors");
  const std::string train_args = "train --model digits_cnn --transform plain --epochs 1 --batch 2 --device cpu "
                                 "--workers 1 --data " + pack;
  const Result trained = kiln(train_args + " --checkpoint " + ckpt);
  ASSERT_EQ(trained.rc, 0) << trained.output;

  damage_record(pack, "train", 4);  // train/b/img_1.jpg
  damage_record(pack, "val", 1);    // val/b/v0.jpg
  const Result train = kiln(train_args);
  EXPECT_NE(train.rc, 0) << train.output;
  expect_contains(train, {"record 4 of " + pack + "/train-00000.kpk (source: train/b/img_1.jpg) is damaged",
                          "re-create it with kiln pack", "--skip-bad"}, train_args);
  const std::string eval_args = "eval --checkpoint " + ckpt + " --device cpu --data " + pack;
  const Result eval = kiln(eval_args);
  EXPECT_NE(eval.rc, 0) << eval.output;
  expect_contains(eval, {"record 1 of " + pack + "/val-00000.kpk (source: val/b/v0.jpg) is damaged",
                         "re-create it with kiln pack"}, eval_args);
}

}  // namespace
}  // namespace kiln

// kiln packs (src/data/pack/): the files write_pack makes, what PackRecords reads back, the
// errors of damaged packs, and samples equal to those of the image folder they came from; every
// image decoded when packed (a bad one refused, or left out with skip_bad), and each record's
// source file named in messages about it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "data/image/image_codec.h"
#include "data/pack/open_packed.h"
#include "data/pack/pack_records.h"
#include "data/pack/pack_writer.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"
#include "support/test_pictures.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::expect_error;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

constexpr int kMaxSide = 64;

using testing::picture;

void write_jpeg(const fs::path& path, int w, int h, int c, uint32_t seed, JpegEncodeOptions o = {}) {
  fs::create_directories(path.parent_path());
  const std::vector<uint8_t> p = picture(w, h, c, seed);
  write_bytes(path.string(), encode_jpeg(p.data(), w, h, c, o));
}

void write_png(const fs::path& path, int w, int h, int c, uint32_t seed) {
  fs::create_directories(path.parent_path());
  const std::vector<uint8_t> p = picture(w, h, c, seed);
  write_bytes(path.string(), encode_png(p.data(), w, h, c));
}

// What each training image of the folder is, in the folder's (and the pack's) order.
struct Expected {
  std::string file;
  int label, width, height, channels;
  bool kept;
};

const std::vector<Expected>& train_images() {
  static const std::vector<Expected> images = {
      {"a/0_small.jpg", 0, 40, 30, 3, true},   // within max_side: stored as it is
      {"a/1_big.jpg", 0, 64, 43, 3, false},    // 300x200 -> 64x43 (42.67 rounded)
      {"a/2_gray.png", 0, 46, 64, 1, false},   // gray 50x70 -> 46x64, stays gray
      {"b/0_edge.jpg", 1, 64, 64, 3, true},    // exactly max_side: kept
      {"b/1_small.png", 1, 20, 30, 3, false},  // a PNG is re-encoded, never upscaled
      {"b/2_gray.jpg", 1, 32, 24, 1, true},    // a gray JPEG: kept
      {"b/3_exif.jpg", 1, 64, 51, 3, false},   // 100x80 with EXIF orientation 6 -> 64x51, tag kept
  };
  return images;
}

// train/ and val/ of the images above, and two validation images.
fs::path make_folder(const fs::path& root) {
  write_jpeg(root / "train/a/0_small.jpg", 40, 30, 3, 1);
  write_jpeg(root / "train/a/1_big.jpg", 300, 200, 3, 2);
  write_png(root / "train/a/2_gray.png", 50, 70, 1, 3);
  write_jpeg(root / "train/b/0_edge.jpg", 64, 64, 3, 4);
  write_png(root / "train/b/1_small.png", 20, 30, 3, 5);
  write_jpeg(root / "train/b/2_gray.jpg", 32, 24, 1, 6);
  JpegEncodeOptions exif;
  exif.exif_orientation = 6;
  write_jpeg(root / "train/b/3_exif.jpg", 100, 80, 3, 7, exif);
  write_jpeg(root / "val/a/v0.jpg", 48, 40, 3, 8);
  write_png(root / "val/b/v1.png", 80, 60, 3, 9);
  return root;
}

PackOptions small_pack(int workers = 2) {
  PackOptions o;
  o.max_side = kMaxSide;
  o.quality = 90;
  o.shard_bytes = 6000;  // a few records per shard
  o.workers = workers;
  o.progress = false;
  return o;
}

nlohmann::json manifest_of(const fs::path& pack) {
  const std::vector<uint8_t> bytes = read_bytes((pack / "kiln-pack.json").string());
  return nlohmann::json::parse(bytes.begin(), bytes.end());
}

// Entry `i` of a split's index, as the format lays it out.
struct IndexEntry {
  uint32_t shard;
  uint64_t offset;
  uint32_t size, label, crc;
};
IndexEntry index_entry(const fs::path& pack, const std::string& split, int64_t i) {
  const std::vector<uint8_t> index = read_bytes((pack / (split + ".kpi")).string());
  const uint8_t* p = index.data() + pack_format::kIndexHeaderBytes + i * pack_format::kIndexEntryBytes;
  return {pack_format::load_u32(p), pack_format::load_u64(p + 4), pack_format::load_u32(p + 12),
          pack_format::load_u32(p + 16), pack_format::load_u32(p + 20)};
}

std::unique_ptr<PackRecords> open_split(const fs::path& pack, const std::string& split = "train") {
  const PackManifest m = read_pack_manifest(pack.string());
  return std::make_unique<PackRecords>(pack.string(), *m.find(split), int(m.classes.size()));
}

// A packed folder in a fresh temp dir, shared by the tests of damaged copies.
class PackFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    src = make_folder(dir.path() / "src");
    pack = dir.path() / "pack";
    write_pack(src.string(), pack.string(), small_pack());
  }
  // A copy of the pack, to damage.
  fs::path copy_of(const std::string& name) {
    const fs::path to = dir.path() / name;
    fs::copy(pack, to, fs::copy_options::recursive);
    return to;
  }
  TempDir dir;
  fs::path src, pack;
};

using PackWrite = PackFixture;

TEST_F(PackWrite, ManifestShardsAndIndexDescribeEveryRecord) {
  EXPECT_TRUE(fs::is_directory(pack));
  EXPECT_FALSE(fs::exists(dir.path() / "pack.partial"));
  const nlohmann::json m = manifest_of(pack);
  EXPECT_EQ(m["format"], "kiln-pack");
  EXPECT_EQ(m["version"], 1);
  EXPECT_EQ(m["classes"], (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(m["settings"]["max_side"], kMaxSide);
  EXPECT_EQ(m["settings"]["quality"], 90);
  EXPECT_EQ(m["splits"]["train"]["count"], 7);
  EXPECT_EQ(m["splits"]["train"]["kept"], 3);
  EXPECT_EQ(m["splits"]["train"]["reencoded"], 4);
  EXPECT_EQ(m["splits"]["val"]["count"], 2);
  EXPECT_EQ(m["splits"]["train"]["index"], "train.kpi");
  EXPECT_EQ(m["splits"]["train"]["sources"], "train.kps");
  EXPECT_EQ(m["splits"]["val"]["sources"], "val.kps");
  EXPECT_EQ(m["splits"]["train"]["skipped"], nlohmann::json::array());
  for (const std::string split : {"train", "val"}) {
    const nlohmann::json& s = m["splits"][split];
    ASSERT_EQ(s["shards"].size(), s["shard_bytes"].size());
    for (size_t k = 0; k < s["shards"].size(); ++k) {
      const std::string name = s["shards"][k];
      EXPECT_EQ(name, pack_format::shard_name(split, int(k)));
      EXPECT_EQ(int64_t(fs::file_size(pack / name)), s["shard_bytes"][k].get<int64_t>()) << name;
      const std::vector<uint8_t> bytes = read_bytes((pack / name).string());
      EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 4), "KPK1");
    }
  }
  // The small shard size spreads the training records over several shards.
  EXPECT_GE(m["splits"]["train"]["shards"].size(), 2u);
  // Nothing else in the folder.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(pack)) files += entry.is_regular_file();
  EXPECT_EQ(files, 1 + 2 + 2 + int(m["splits"]["train"]["shards"].size() + m["splits"]["val"]["shards"].size()));
}

TEST_F(PackWrite, KeepsSmallJpegsByteForByteAndDownscalesTheRest) {
  const auto records = open_split(pack);
  const auto& images = train_images();
  ASSERT_EQ(records->count(), int64_t(images.size()));
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < images.size(); ++i) {
    const Expected& e = images[i];
    SCOPED_TRACE(e.file);
    EXPECT_EQ(records->label(int64_t(i)), e.label);
    EXPECT_EQ(int(index_entry(pack, "train", int64_t(i)).label), e.label);
    records->read(int64_t(i), bytes);
    const ImageInfo info = read_image_info(bytes.data(), bytes.size(), e.file);
    EXPECT_EQ(info.format, ImageFormat::Jpeg);
    EXPECT_EQ(info.width, e.width);
    EXPECT_EQ(info.height, e.height);
    EXPECT_EQ(info.stored_channels, e.channels);
    EXPECT_LE(std::max(info.width, info.height), kMaxSide);
    if (e.kept) {
      EXPECT_EQ(bytes, read_bytes((src / "train" / e.file).string()));
    }
  }
  // The large one's longer side is max_side after decoding too.
  records->read(1, bytes);
  const DecodedImage big = decode_image(bytes.data(), bytes.size(), "big");
  EXPECT_EQ(std::max(big.width, big.height), kMaxSide);
  // The EXIF orientation survives re-encoding (the pixels stay in stored orientation).
  records->read(6, bytes);
  EXPECT_EQ(read_image_info(bytes.data(), bytes.size(), "exif").orientation, 6);
  EXPECT_NE(records->name(6).find("train-0000"), std::string::npos) << records->name(6);

  const auto val = open_split(pack, "val");
  ASSERT_EQ(val->count(), 2);
  val->read(0, bytes);
  EXPECT_EQ(bytes, read_bytes((src / "val/a/v0.jpg").string()));
  EXPECT_EQ(val->label(1), 1);
  val->read(1, bytes);
  const ImageInfo v1 = read_image_info(bytes.data(), bytes.size(), "v1");
  EXPECT_EQ(v1.width, 64);
  EXPECT_EQ(v1.height, 48);
}

TEST(Pack, OutputBytesDoNotDependOnTheWorkerCount) {
  TempDir dir;
  const fs::path src = make_folder(dir.path() / "src");
  // More records than the writer's window of records in flight (16 for 3 workers), of uneven cost.
  for (int i = 0; i < 40; ++i) {
    const fs::path file = src / "train" / (i % 2 ? "a" : "b") / fmt::format("more_{:02d}", i);
    if (i % 3 == 0)
      write_png(file.string() + ".png", 8 + i, 90 - i, 3, uint32_t(100 + i));
    else
      write_jpeg(file.string() + ".jpg", 30 + 3 * i, 20 + i, 3, uint32_t(100 + i));
  }
  write_pack(src.string(), (dir.path() / "one").string(), small_pack(1));
  write_pack(src.string(), (dir.path() / "three").string(), small_pack(3));
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.path() / "one")) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  std::vector<std::string> other;
  for (const auto& entry : fs::directory_iterator(dir.path() / "three")) other.push_back(entry.path().filename());
  std::sort(other.begin(), other.end());
  ASSERT_EQ(names, other);
  for (const std::string& name : names)
    EXPECT_EQ(read_bytes((dir.path() / "one" / name).string()), read_bytes((dir.path() / "three" / name).string()))
        << name;
}

TEST(Pack, ClassFoldersDirectlyGiveATrainingSplitOnly) {
  TempDir dir;
  write_jpeg(dir.path() / "src/x/0.jpg", 30, 20, 3, 1);
  write_jpeg(dir.path() / "src/y/0.jpg", 30, 20, 3, 2);
  const fs::path pack = dir.path() / "pack";
  // Trailing slashes are fine, and source paths are relative to the folder however it is spelled.
  write_pack((dir.path() / "src").string() + "/", pack.string() + "/", small_pack());
  const nlohmann::json m = manifest_of(pack);
  EXPECT_EQ(m["splits"]["train"]["count"], 2);
  EXPECT_FALSE(m["splits"].contains("val"));
  DataOptions o;
  o.transform.size = 16;
  o.transform.eval_resize = 18;
  const DataSplits splits = open_packed_dataset(pack.string(), o);
  EXPECT_EQ(open_split(pack)->source(1), "y/0.jpg");  // relative to the folder packed
  EXPECT_EQ(splits.format, "packed");
  EXPECT_EQ(splits.train->count(), 2);
  EXPECT_EQ(splits.test->count(), 0);
  EXPECT_EQ(splits.test->class_names(), (std::vector<std::string>{"x", "y"}));
}

TEST_F(PackWrite, RefusesAnExistingOutputAndLeavesNothingBehindOnFailure) {
  const std::string before = manifest_of(pack).dump();
  expect_error([&] { write_pack(src.string(), pack.string(), small_pack()); }, {pack.string(), "already exists"});
  EXPECT_EQ(manifest_of(pack).dump(), before);
  fs::create_directories(dir.path() / "empty");
  expect_error([&] { write_pack(src.string(), (dir.path() / "empty").string(), small_pack()); },
               {(dir.path() / "empty").string(), "never overwrites"});
  EXPECT_TRUE(fs::is_empty(dir.path() / "empty"));

  // An image that cannot be decoded: an error naming it, and neither OUT nor OUT.partial left.
  write_png(src / "train/b/9_bad.png", 20, 20, 3, 1);
  write_bytes((src / "train/b/9_bad.png").string(), {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0});
  const fs::path out = dir.path() / "out";
  const std::string message = error_of([&] { write_pack(src.string(), out.string(), small_pack(3)); });
  EXPECT_NE(message.find("9_bad.png"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(dir.path() / "out.partial"));

  expect_error([&] { write_pack((dir.path() / "nowhere").string(), out.string(), small_pack()); }, {"nowhere"});
  PackOptions bad = small_pack();
  bad.quality = 0;
  expect_error([&] { write_pack(src.string(), out.string(), bad); }, {"quality", "90"});
}

using PackDamage = PackFixture;

TEST_F(PackDamage, AFlippedPayloadByteNamesTheShardAndTheRecord) {
  const fs::path damaged = copy_of("flipped");
  const IndexEntry e = index_entry(damaged, "train", 3);
  const fs::path shard = damaged / pack_format::shard_name("train", int(e.shard));
  std::vector<uint8_t> bytes = read_bytes(shard.string());
  bytes[e.offset + e.size / 2] ^= 0x10;
  write_bytes(shard.string(), bytes);

  const auto records = open_split(damaged);  // the index and sizes are intact: opening succeeds
  std::vector<uint8_t> payload;
  expect_error([&] { records->read(3, payload); },
               {"record 3 of " + shard.string() + " (source: train/b/0_edge.jpg) is damaged (checksum mismatch)",
                "kiln pack", "--skip-bad"});
  for (int64_t i : {0, 1, 2, 4, 5, 6}) EXPECT_NO_THROW(records->read(i, payload)) << i;

  // Through the dataset: an error, or with --skip-bad the next record in its place.
  DataOptions o;
  o.transform.size = 16;
  o.transform.eval_resize = 18;
  {
    const DataSplits splits = open_packed_dataset(damaged.string(), o);
    std::vector<uint8_t> px(splits.train->shape().size());
    expect_error([&] { splits.train->write_sample(3, 1, 0, px.data()); },
                 {"record 3", "(source: train/b/0_edge.jpg)", "damaged"});
  }
  o.skip_bad = true;
  const DataSplits splits = open_packed_dataset(damaged.string(), o);
  std::vector<uint8_t> px(splits.train->shape().size());
  EXPECT_EQ(splits.train->write_sample(3, 1, 0, px.data()), train_images()[4].label);
  ASSERT_EQ(splits.train->skipped().size(), 1u);
  EXPECT_NE(splits.train->skipped()[0].find("record 3"), std::string::npos);
  EXPECT_NE(splits.train->skipped()[0].find("train/b/0_edge.jpg"), std::string::npos) << splits.train->skipped()[0];
}

TEST_F(PackDamage, ATruncatedShardIsNamed) {
  const fs::path damaged = copy_of("truncated");
  const fs::path shard = damaged / "train-00000.kpk";
  fs::resize_file(shard, fs::file_size(shard) - 10);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {shard.string(), "truncated", "kiln pack"});
}

TEST_F(PackDamage, ABadMagicIsNamed) {
  const fs::path damaged = copy_of("magic");
  const fs::path shard = damaged / "train-00001.kpk";
  std::vector<uint8_t> bytes = read_bytes(shard.string());
  bytes[0] = 'X';
  write_bytes(shard.string(), bytes);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {shard.string(), "not a kiln pack shard"});
}

TEST_F(PackDamage, AMissingShardOrIndexIsNamed) {
  const fs::path damaged = copy_of("missing");
  fs::remove(damaged / "val-00000.kpk");
  expect_error([&] { open_packed_dataset(damaged.string(), {}); },
               {(damaged / "val-00000.kpk").string(), "missing", "kiln pack"});
  const fs::path copy2 = copy_of("noindex");
  fs::remove(copy2 / "train.kpi");
  expect_error([&] { open_packed_dataset(copy2.string(), {}); }, {(copy2 / "train.kpi").string(), "kiln pack"});
}

TEST_F(PackDamage, AnIndexEntryOutsideItsShardIsNamed) {
  const fs::path damaged = copy_of("outside");
  const fs::path index = damaged / "train.kpi";
  std::vector<uint8_t> bytes = read_bytes(index.string());
  const IndexEntry e = index_entry(damaged, "train", 2);
  pack_format::store_u64(bytes.data() + pack_format::kIndexHeaderBytes + 2 * pack_format::kIndexEntryBytes + 4,
                         e.offset + 1000000);
  write_bytes(index.string(), bytes);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); },
               {"entry 2", index.string(), "points outside", pack_format::shard_name("train", int(e.shard))});
  // A truncated index.
  bytes.resize(bytes.size() - 5);
  write_bytes(index.string(), bytes);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {index.string(), "truncated"});
}

TEST_F(PackDamage, AMalformedManifestIsNamed) {
  const fs::path damaged = copy_of("manifest");
  const std::string manifest = (damaged / "kiln-pack.json").string();
  const std::vector<uint8_t> good = read_bytes(manifest);
  write_bytes(manifest, {'{', '"', 'f'});
  expect_error([&] { open_packed_dataset(damaged.string(), {}); },
               {manifest, "malformed", "not valid JSON", "kiln pack"});

  nlohmann::json m = nlohmann::json::parse(good.begin(), good.end());
  auto write = [&](const nlohmann::json& j) {
    const std::string text = j.dump();
    write_bytes(manifest, std::vector<uint8_t>(text.begin(), text.end()));
  };
  nlohmann::json no_count = m;
  no_count["splits"]["train"].erase("count");
  write(no_count);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {manifest, "\"count\""});
  nlohmann::json wrong_type = m;
  wrong_type["settings"]["quality"] = "high";
  write(wrong_type);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {manifest, "quality"});
  nlohmann::json escape = m;
  escape["splits"]["train"]["shards"][0] = "../elsewhere.kpk";
  write(escape);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {manifest, "../elsewhere.kpk"});
  nlohmann::json escape_sources = m;
  escape_sources["splits"]["val"]["sources"] = "../elsewhere.kps";
  write(escape_sources);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {manifest, "\"sources\"", "../elsewhere.kps"});
  nlohmann::json newer = m;
  newer["version"] = 2;
  write(newer);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {damaged.string(), "version 2"});
  fs::remove(manifest);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {manifest, "kiln pack"});
}

// ---- every image decoded when packed; each record's source file ----

// Cuts a file to its first half: a JPEG then ends inside its scan data.
void truncate_to_half(const fs::path& file) {
  std::vector<uint8_t> bytes = read_bytes(file.string());
  bytes.resize(bytes.size() / 2);
  write_bytes(file.string(), bytes);
}

TEST_F(PackWrite, EveryRecordKnowsItsSourceFile) {
  const auto records = open_split(pack);
  const auto& images = train_images();
  for (size_t i = 0; i < images.size(); ++i) {
    const fs::path shard = pack / pack_format::shard_name("train", int(index_entry(pack, "train", int64_t(i)).shard));
    EXPECT_EQ(records->source(int64_t(i)), "train/" + images[i].file);
    EXPECT_EQ(records->name(int64_t(i)), fmt::format("record {} of {} (source: train/{})", i, shard.string(),
                                                     images[i].file));
  }
  const auto val = open_split(pack, "val");
  EXPECT_EQ(val->source(0), "val/a/v0.jpg");
  EXPECT_EQ(val->source(1), "val/b/v1.png");
}

// A JPEG within max_side is stored as its own bytes, yet decoded all the same: a truncated one is
// refused when packing, naming the file (kiln 1540906 packed it as it was, and training failed on
// "record N of a shard" that the user could neither re-encode nor remove).
TEST_F(PackWrite, ATruncatedJpegIsRefusedNamingItsFile) {
  const fs::path bad = src / "train/a/5_cut.jpg";
  write_jpeg(bad, 40, 30, 3, 11);
  truncate_to_half(bad);
  const fs::path out = dir.path() / "out";
  for (const int workers : {1, 3}) {
    SCOPED_TRACE(workers);
    expect_error([&] { write_pack(src.string(), out.string(), small_pack(workers)); },
                 {"truncated or corrupt JPEG '" + bad.string() + "'", "--skip-bad"});
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(dir.path() / "out.partial"));
  }
}

// With skip_bad the bad files are left out and listed, and the pack is the one of the folder
// without them, byte for byte: counts, labels, shards, index and source list agree.
TEST_F(PackWrite, SkipBadLeavesBadImagesOutAndListsThem) {
  const fs::path cut = src / "train/a/5_cut.jpg";
  write_jpeg(cut, 40, 30, 3, 11);
  truncate_to_half(cut);
  fs::copy_file(src / "train/a/0_small.jpg", src / "train/b/8_drawing.bmp");  // an extension kiln cannot read
  write_bytes((src / "val/b/v2_bad.png").string(), {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0});
  const fs::path out = dir.path() / "out";
  PackOptions o = small_pack(3);
  o.skip_bad = true;
  const PackResult r = write_pack(src.string(), out.string(), o);
  EXPECT_EQ(r.train, 7);
  EXPECT_EQ(r.val, 2);
  EXPECT_TRUE(r.empty_classes.empty());
  ASSERT_EQ(r.skipped.size(), 3u);
  EXPECT_EQ(r.skipped[0].source, "train/a/5_cut.jpg");
  EXPECT_NE(r.skipped[0].reason.find("truncated or corrupt JPEG '" + cut.string() + "'"), std::string::npos)
      << r.skipped[0].reason;
  EXPECT_EQ(r.skipped[1].source, "train/b/8_drawing.bmp");
  EXPECT_NE(r.skipped[1].reason.find("not a JPEG or PNG"), std::string::npos) << r.skipped[1].reason;
  EXPECT_EQ(r.skipped[2].source, "val/b/v2_bad.png");

  const nlohmann::json m = manifest_of(out);
  EXPECT_EQ(m["splits"]["train"]["count"], 7);
  EXPECT_EQ(m["splits"]["train"]["skipped"], (std::vector<std::string>{"train/a/5_cut.jpg", "train/b/8_drawing.bmp"}));
  EXPECT_EQ(m["splits"]["val"]["count"], 2);
  EXPECT_EQ(m["splits"]["val"]["skipped"], (std::vector<std::string>{"val/b/v2_bad.png"}));
  const auto records = open_split(out);
  ASSERT_EQ(records->count(), 7);
  for (size_t i = 0; i < train_images().size(); ++i) {
    EXPECT_EQ(records->label(int64_t(i)), train_images()[i].label);
    EXPECT_EQ(records->source(int64_t(i)), "train/" + train_images()[i].file);
  }
  // The same records as the pack of the clean folder (the fixture's).
  for (const std::string name : {"train.kpi", "train.kps", "val.kpi", "val.kps"})
    EXPECT_EQ(read_bytes((out / name).string()), read_bytes((pack / name).string())) << name;
  const nlohmann::json clean = manifest_of(pack);
  for (const std::string split : {"train", "val"})
    for (const nlohmann::json& shard : clean["splits"][split]["shards"])
      EXPECT_EQ(read_bytes((out / shard.get<std::string>()).string()),
                read_bytes((pack / shard.get<std::string>()).string()))
          << shard;
}

TEST(Pack, SkipBadNamesAClassLeftWithoutImagesAndRefusesAnEmptyPack) {
  TempDir dir;
  write_jpeg(dir.path() / "src/x/0.jpg", 30, 20, 3, 1);
  write_jpeg(dir.path() / "src/y/0.jpg", 30, 20, 3, 2);
  truncate_to_half(dir.path() / "src/y/0.jpg");
  PackOptions o = small_pack();
  o.skip_bad = true;
  const PackResult r = write_pack((dir.path() / "src").string(), (dir.path() / "pack").string(), o);
  EXPECT_EQ(r.train, 1);
  EXPECT_EQ(r.empty_classes, (std::vector<std::string>{"y"}));
  EXPECT_EQ(manifest_of(dir.path() / "pack")["classes"], (std::vector<std::string>{"x", "y"}));  // labels keep their ranks

  truncate_to_half(dir.path() / "src/x/0.jpg");
  expect_error([&] { write_pack((dir.path() / "src").string(), (dir.path() / "none").string(), o); },
               {"no training image", (dir.path() / "src").string(), "x/0.jpg"});
  EXPECT_FALSE(fs::exists(dir.path() / "none.partial"));
}

// Packs made before source lists (no "sources" in kiln-pack.json, no .kps files) read as before;
// their records are named by shard, with why there is no source and what gives one.
TEST_F(PackDamage, APackWithoutSourceListsReadsAndSaysWhyRecordsHaveNoSource) {
  const fs::path old = copy_of("old");
  nlohmann::json m = manifest_of(old);
  for (const std::string split : {"train", "val"}) {
    m["splits"][split].erase("sources");
    m["splits"][split].erase("skipped");
    fs::remove(old / pack_format::sources_name(split));
  }
  const std::string text = m.dump(2);
  write_bytes((old / "kiln-pack.json").string(), std::vector<uint8_t>(text.begin(), text.end()));
  const auto records = open_split(old);
  EXPECT_EQ(records->source(0), "");
  EXPECT_NE(records->name(0).find("source file not recorded"), std::string::npos) << records->name(0);
  EXPECT_NE(records->name(0).find("kiln pack"), std::string::npos) << records->name(0);
  std::vector<uint8_t> a, b;
  const auto fresh = open_split(pack);
  for (int64_t i = 0; i < records->count(); ++i) {
    records->read(i, a);
    fresh->read(i, b);
    EXPECT_EQ(a, b) << i;
  }
  DataOptions o;
  o.transform.size = 16;
  o.transform.eval_resize = 18;
  EXPECT_EQ(open_packed_dataset(old.string(), o).train->count(), 7);
}

TEST_F(PackDamage, ADamagedSourceListIsNamed) {
  const fs::path damaged = copy_of("sources");
  const fs::path list = damaged / "train.kps";
  const std::vector<uint8_t> good = read_bytes(list.string());
  fs::remove(list);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {list.string(), "missing", "kiln pack"});

  write_bytes(list.string(), std::vector<uint8_t>(good.begin(), good.begin() + 40));
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {list.string(), "truncated", "kiln pack"});

  std::vector<uint8_t> bytes = good;
  bytes[0] = 'X';
  write_bytes(list.string(), bytes);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {list.string(), "not a kiln pack source list"});

  // Entry 2's end before its start.
  bytes = good;
  const size_t third = size_t(pack_format::kSourcesHeaderBytes) + 8 * 3;
  pack_format::store_u64(bytes.data() + third, 1);
  write_bytes(list.string(), bytes);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {"entry 2", list.string(), "damaged"});

  // A count unlike the index's.
  bytes = good;
  pack_format::store_u64(bytes.data() + 8, 6);
  write_bytes(list.string(), bytes);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); }, {list.string(), "holds 6 records", "says 7"});
}

// An index entry's error names the record's source file too.
TEST_F(PackDamage, AnIndexEntryErrorNamesTheSourceFile) {
  const fs::path damaged = copy_of("label");
  const fs::path index = damaged / "train.kpi";
  std::vector<uint8_t> bytes = read_bytes(index.string());
  pack_format::store_u32(bytes.data() + pack_format::kIndexHeaderBytes + 4 * pack_format::kIndexEntryBytes + 16, 9);
  write_bytes(index.string(), bytes);
  expect_error([&] { open_packed_dataset(damaged.string(), {}); },
               {"entry 4 (source: train/b/1_small.png)", index.string(), "label 9", "kiln pack"});
}

// Kept JPEGs are the original bytes, so a pack's samples equal the image folder's bit for bit,
// whatever the transform's randomness.
TEST_F(PackWrite, SamplesOfKeptJpegsEqualTheImageFolders) {
  for (const int channels : {3, 1}) {
    SCOPED_TRACE(channels);
    DataOptions o;
    o.transform.size = 24;
    o.transform.eval_resize = 28;
    o.transform.channels = channels;
    DataOptions folder = o;
    folder.format = "imagefolder";
    const DataSplits packed = open_packed_dataset(pack.string(), o);
    const DataSplits files = open_dataset(src.string(), folder);
    ASSERT_EQ(packed.train->count(), files.train->count());
    ASSERT_EQ(packed.test->count(), files.test->count());
    EXPECT_EQ(packed.train->class_names(), files.train->class_names());
    ASSERT_EQ(packed.train->shape().size(), files.train->shape().size());
    std::vector<uint8_t> a(packed.train->shape().size()), b(a.size());
    int compared = 0;
    for (int epoch = 0; epoch < 2; ++epoch)
      for (int64_t i = 0; i < packed.train->count(); ++i) {
        EXPECT_EQ(packed.train->write_sample(i, 7, epoch, a.data()), files.train->write_sample(i, 7, epoch, b.data()));
        if (!train_images()[size_t(i)].kept) continue;
        EXPECT_EQ(a, b) << "train record " << i << ", epoch " << epoch;
        ++compared;
      }
    EXPECT_EQ(compared, 6);
    EXPECT_EQ(packed.test->write_sample(0, 7, 0, a.data()), files.test->write_sample(0, 7, 0, b.data()));
    EXPECT_EQ(a, b) << "val record 0";
    EXPECT_EQ(packed.test->write_sample(1, 7, 0, a.data()), 1);
  }
}

}  // namespace
}  // namespace kiln

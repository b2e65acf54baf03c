#include <gtest/gtest.h>

#include <random>

#include "support/temp_dir.h"
#include "kiln/data.h"
#include "kiln/error.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(uint8_t(x >> s));
}

// Hand-made IDX files, independent of the writer under test.
std::vector<uint8_t> idx_images(uint32_t n, uint32_t h, uint32_t w, std::mt19937& rng) {
  std::vector<uint8_t> v;
  put_be32(v, 0x803);
  put_be32(v, n);
  put_be32(v, h);
  put_be32(v, w);
  for (uint32_t i = 0; i < n * h * w; ++i) v.push_back(uint8_t(rng()));
  return v;
}
std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> v;
  put_be32(v, 0x801);
  put_be32(v, uint32_t(labels.size()));
  v.insert(v.end(), labels.begin(), labels.end());
  return v;
}

TEST(Idx, ReadsHandMadeFiles) {
  TempDir dir;
  std::mt19937 rng(1);
  auto images = idx_images(3, 4, 5, rng);
  write_bytes(dir.file("i"), images);
  write_bytes(dir.file("l"), idx_labels({7, 0, 9}));
  Dataset ds = read_idx(dir.file("i"), dir.file("l"));
  EXPECT_EQ(ds.count, 3);
  EXPECT_EQ(ds.height, 4);
  EXPECT_EQ(ds.width, 5);
  EXPECT_EQ(ds.channels, 1);
  EXPECT_EQ(ds.num_classes, 10);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{7, 0, 9}));
  EXPECT_EQ(ds.images, std::vector<uint8_t>(images.begin() + 16, images.end()));
}

TEST(Idx, WriteThenReadIsByteExact) {
  TempDir dir;
  std::mt19937 rng(2);
  auto images = idx_images(6, 3, 2, rng);
  auto labels = idx_labels({1, 2, 3, 4, 5, 6});
  write_bytes(dir.file("i"), images);
  write_bytes(dir.file("l"), labels);
  Dataset ds = read_idx(dir.file("i"), dir.file("l"));
  write_idx(ds, dir.file("i2"), dir.file("l2"));
  EXPECT_EQ(read_bytes(dir.file("i2")), images);
  EXPECT_EQ(read_bytes(dir.file("l2")), labels);
  // No temporary files left next to the outputs.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 4);
}

TEST(Idx, MissingFileSuggestsSetup) {
  TempDir dir;
  std::string msg = error_of([&] { read_idx(dir.file("nope"), dir.file("nope2")); });
  EXPECT_NE(msg.find(dir.file("nope")), std::string::npos) << msg;
  EXPECT_NE(msg.find("scripts/setup.sh"), std::string::npos) << msg;
}

TEST(Idx, WrongMagicNamesFile) {
  TempDir dir;
  std::mt19937 rng(3);
  write_bytes(dir.file("i"), idx_images(2, 2, 2, rng));
  write_bytes(dir.file("l"), idx_labels({0, 1}));
  // Swapped: the labels file where images are expected.
  std::string msg = error_of([&] { read_idx(dir.file("l"), dir.file("i")); });
  EXPECT_NE(msg.find(dir.file("l")), std::string::npos) << msg;
  EXPECT_NE(msg.find("magic 0x00000801"), std::string::npos) << msg;
}

TEST(Idx, TruncatedAndOversizedFiles) {
  TempDir dir;
  std::mt19937 rng(4);
  auto images = idx_images(2, 3, 3, rng);
  write_bytes(dir.file("l"), idx_labels({0, 1}));
  write_bytes(dir.file("i"), std::vector<uint8_t>(images.begin(), images.end() - 1));
  std::string msg = error_of([&] { read_idx(dir.file("i"), dir.file("l")); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  write_bytes(dir.file("i"), std::vector<uint8_t>(images.begin(), images.begin() + 10));
  msg = error_of([&] { read_idx(dir.file("i"), dir.file("l")); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  write_bytes(dir.file("i"), std::vector<uint8_t>(images.begin(), images.begin() + 2));
  msg = error_of([&] { read_idx(dir.file("i"), dir.file("l")); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  images.push_back(0);
  write_bytes(dir.file("i"), images);
  msg = error_of([&] { read_idx(dir.file("i"), dir.file("l")); });
  EXPECT_NE(msg.find("1 bytes after"), std::string::npos) << msg;
}

TEST(Idx, CountMismatchNamesBothFiles) {
  TempDir dir;
  std::mt19937 rng(5);
  write_bytes(dir.file("i"), idx_images(3, 2, 2, rng));
  write_bytes(dir.file("l"), idx_labels({0, 1}));
  std::string msg = error_of([&] { read_idx(dir.file("i"), dir.file("l")); });
  EXPECT_NE(msg.find("3 images"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2 labels"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.file("l")), std::string::npos) << msg;
}

TEST(Idx, LabelOutOfRangeNamesIndexAndValue) {
  TempDir dir;
  std::mt19937 rng(6);
  write_bytes(dir.file("i"), idx_images(3, 2, 2, rng));
  write_bytes(dir.file("l"), idx_labels({0, 4, 1}));
  std::string msg = error_of([&] { read_idx(dir.file("i"), dir.file("l"), 4); });
  EXPECT_NE(msg.find("label 4 at index 1"), std::string::npos) << msg;
  EXPECT_NO_THROW(read_idx(dir.file("i"), dir.file("l"), 5));
}

// An IDX folder has as many classes as its labels name: EMNIST's 47, a user's 13 (label 12), not
// a fixed 10.
TEST(LoadDataset, IdxFolderCountsTheClassesItsLabelsName) {
  TempDir dir;
  std::mt19937 rng(7);
  write_bytes(dir.file("train-images-idx3-ubyte"), idx_images(8, 2, 2, rng));
  write_bytes(dir.file("train-labels-idx1-ubyte"), idx_labels({0, 12, 5, 1, 2, 3, 4, 6}));  // 7-11: no sample
  write_bytes(dir.file("t10k-images-idx3-ubyte"), idx_images(2, 2, 2, rng));
  write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_labels({3, 1}));
  // Both splits take the training labels' count: a test split without the last class still has it.
  EXPECT_EQ(load_dataset(dir.path().string(), "idx", true).num_classes, 13);
  EXPECT_EQ(load_dataset(dir.path().string(), "idx", false).num_classes, 13);
}

// Labels whose range is mostly empty are a damaged file, not 13 classes: refused naming the stray
// labels and their first records. An empty class or two is a data set's own business.
TEST(LoadDataset, IdxLabelsThatLeaveMostClassesEmptyAreRefused) {
  TempDir dir;
  std::mt19937 rng(7);
  write_bytes(dir.file("train-images-idx3-ubyte"), idx_images(5, 2, 2, rng));
  write_bytes(dir.file("train-labels-idx1-ubyte"), idx_labels({0, 12, 1, 5, 1}));
  testing::expect_error([&] { load_dataset(dir.path().string(), "idx", true); },
                        {"train-labels-idx1-ubyte' run up to 12, which makes 13 classes",
                         "9 of them have no training sample (classes 2-4, 6-11)", "Labels 0-1 hold 3 of the 5",
                         "5 (1 sample, the first at record 3), 12 (1 sample, the first at record 1)"});
  write_bytes(dir.file("train-labels-idx1-ubyte"), idx_labels({1, 3, 1, 3, 2}));  // EMNIST-like: no 0
  EXPECT_EQ(load_dataset(dir.path().string(), "idx", true).num_classes, 4);
}

TEST(LoadDataset, UnknownFormatAndMissingDirectory) {
  TempDir dir;
  std::string msg = error_of([&] { load_dataset(dir.path().string(), "png", true); });
  EXPECT_NE(msg.find("'png'"), std::string::npos) << msg;
  msg = error_of([&] { load_dataset(dir.file("absent"), "idx", true); });
  EXPECT_NE(msg.find("scripts/setup.sh"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.file("absent")), std::string::npos) << msg;
  msg = error_of([&] { load_dataset(dir.file("absent"), "cifar10", false); });
  EXPECT_NE(msg.find("cifar-10-binary"), std::string::npos) << msg;
  // Directory exists, files do not: the error names the missing file.
  msg = error_of([&] { load_dataset(dir.path().string(), "idx", false); });
  EXPECT_NE(msg.find("t10k-images-idx3-ubyte"), std::string::npos) << msg;
}

TEST(LoadDataset, FindsIdxFilesByStandardNames) {
  TempDir dir;
  std::mt19937 rng(7);
  write_bytes(dir.file("train-images-idx3-ubyte"), idx_images(4, 2, 2, rng));
  write_bytes(dir.file("train-labels-idx1-ubyte"), idx_labels({0, 1, 2, 3}));
  write_bytes(dir.file("t10k-images-idx3-ubyte"), idx_images(2, 2, 2, rng));
  write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_labels({3, 1}));
  EXPECT_EQ(load_dataset(dir.path().string(), "idx", true).count, 4);
  Dataset test = load_dataset(dir.path().string(), "idx", false);
  EXPECT_EQ(test.labels, (std::vector<int32_t>{3, 1}));
  // Test labels beyond the training classes 0..3 have no output to be scored on.
  write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_labels({5, 6}));
  testing::expect_error([&] { load_dataset(dir.path().string(), "idx", false); },
                        {"t10k-labels-idx1-ubyte' include classes the training labels", "classes 0-3",
                         "5 (1 sample, the first at record 0), 6 (1 sample, the first at record 1)"});
}

}  // namespace
}  // namespace kiln

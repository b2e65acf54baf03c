#include <gtest/gtest.h>

#include <random>

#include "support/temp_dir.h"
#include "kiln/data.h"
#include "kiln/error.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

// One CIFAR record per label with random planar (CHW) pixels.
std::vector<uint8_t> cifar_records(const std::vector<uint8_t>& labels, std::mt19937& rng) {
  std::vector<uint8_t> v;
  for (uint8_t label : labels) {
    v.push_back(label);
    for (int i = 0; i < 3072; ++i) v.push_back(uint8_t(rng()));
  }
  return v;
}

TEST(Cifar10, ConvertsPlanarRecordsToHwc) {
  TempDir dir;
  std::mt19937 rng(11);
  auto a = cifar_records({3, 9}, rng), b = cifar_records({0}, rng);
  write_bytes(dir.file("a.bin"), a);
  write_bytes(dir.file("b.bin"), b);
  Dataset ds = read_cifar10({dir.file("a.bin"), dir.file("b.bin")});
  ASSERT_EQ(ds.count, 3);
  EXPECT_EQ(ds.height, 32);
  EXPECT_EQ(ds.width, 32);
  EXPECT_EQ(ds.channels, 3);
  EXPECT_EQ(ds.num_classes, 10);
  EXPECT_EQ(ds.labels, (std::vector<int32_t>{3, 9, 0}));
  std::vector<uint8_t> all = a;
  all.insert(all.end(), b.begin(), b.end());
  for (int n = 0; n < 3; ++n)
    for (int y = 0; y < 32; ++y)
      for (int x = 0; x < 32; ++x)
        for (int c = 0; c < 3; ++c)
          ASSERT_EQ(ds.images[((n * 32 + y) * 32 + x) * 3 + c], all[n * 3073 + 1 + c * 1024 + y * 32 + x]);
}

TEST(Cifar10, RejectsPartialRecords) {
  TempDir dir;
  std::mt19937 rng(12);
  auto bytes = cifar_records({1, 2}, rng);
  bytes.pop_back();
  write_bytes(dir.file("x.bin"), bytes);
  std::string msg = error_of([&] { read_cifar10({dir.file("x.bin")}); });
  EXPECT_NE(msg.find(dir.file("x.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("multiple of the 3073"), std::string::npos) << msg;
}

TEST(Cifar10, RejectsOutOfRangeLabel) {
  TempDir dir;
  std::mt19937 rng(13);
  write_bytes(dir.file("x.bin"), cifar_records({1, 2, 10}, rng));
  std::string msg = error_of([&] { read_cifar10({dir.file("x.bin")}); });
  EXPECT_NE(msg.find("label 10 of record 2"), std::string::npos) << msg;
}

TEST(Cifar10, MissingFileSaysHowToGetIt) {
  TempDir dir;
  std::string msg = error_of([&] { read_cifar10({dir.file("data_batch_1.bin")}); });
  EXPECT_NE(msg.find("data_batch_1.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cifar-10-binary.tar.gz"), std::string::npos) << msg;
}

TEST(Cifar10, LoadDatasetAcceptsExtractedSubfolder) {
  TempDir dir;
  std::mt19937 rng(14);
  auto sub = dir.path() / "cifar-10-batches-bin";
  std::filesystem::create_directories(sub);
  for (int i = 1; i <= 5; ++i)
    write_bytes((sub / ("data_batch_" + std::to_string(i) + ".bin")).string(), cifar_records({uint8_t(i)}, rng));
  write_bytes((sub / "test_batch.bin").string(), cifar_records({7, 8}, rng));
  Dataset train = load_dataset(dir.path().string(), "cifar10", true);
  EXPECT_EQ(train.labels, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(load_dataset(sub.string(), "cifar10", false).labels, (std::vector<int32_t>{7, 8}));
}

}  // namespace
}  // namespace kiln

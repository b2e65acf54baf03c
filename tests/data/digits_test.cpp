#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "support/temp_dir.h"
#include "kiln/data.h"
#include "kiln/error.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using testing::read_bytes;
using testing::TempDir;

const std::string kShared = KILN_SOURCE_DIR "/../shared/data/digits";
const std::string kPng = "/usr/share/doc/opencv-doc/examples/data/digits.png";

// (label, pixels) of every sample, sorted: equal vectors mean equal multisets.
std::vector<std::pair<int32_t, std::vector<uint8_t>>> multiset(const Dataset& ds) {
  std::vector<std::pair<int32_t, std::vector<uint8_t>>> items;
  for (int64_t i = 0; i < ds.count; ++i)
    items.emplace_back(ds.labels[i], std::vector<uint8_t>(ds.images.begin() + i * ds.image_size(),
                                                          ds.images.begin() + (i + 1) * ds.image_size()));
  std::sort(items.begin(), items.end());
  return items;
}

bool have_shared() { return std::filesystem::exists(kShared + "/train-labels-idx1-ubyte"); }

TEST(Digits, SharedFilesHaveTheDocumentedShape) {
  if (!have_shared()) GTEST_SKIP() << kShared << " is absent";
  for (bool train : {true, false}) {
    Dataset ds = load_dataset(kShared, "idx", train);
    EXPECT_EQ(ds.count, train ? 4000 : 1000);
    EXPECT_EQ(ds.height, 20);
    EXPECT_EQ(ds.width, 20);
    std::vector<int> per_class(10, 0);
    for (int32_t l : ds.labels) ++per_class[l];
    for (int n : per_class) EXPECT_EQ(n, train ? 400 : 100);
  }
}

TEST(Digits, WriterReproducesSharedFilesByteForByte) {
  if (!have_shared()) GTEST_SKIP() << kShared << " is absent";
  TempDir dir;
  Dataset ds = load_dataset(kShared, "idx", true);
  write_idx(ds, dir.file("i"), dir.file("l"));
  EXPECT_EQ(read_bytes(dir.file("i")), read_bytes(kShared + "/train-images-idx3-ubyte"));
  EXPECT_EQ(read_bytes(dir.file("l")), read_bytes(kShared + "/train-labels-idx1-ubyte"));
}

// Lays the shared digits back out as a 2000x1000 sheet (digit d in rows 5d..5d+4, training
// digits in columns 0-79, test digits in 80-99) and checks that the split recovers both sets.
TEST(Digits, SplitOfReassembledSheetRecoversSharedSets) {
  if (!have_shared()) GTEST_SKIP() << kShared << " is absent";
  Dataset train = load_dataset(kShared, "idx", true), test = load_dataset(kShared, "idx", false);
  std::vector<uint8_t> sheet(2000 * 1000, 0);
  std::vector<int> train_used(10, 0), test_used(10, 0);
  auto place = [&](const Dataset& ds, int64_t i, int slot, int first_col, int cols) {
    int label = ds.labels[i];
    int row = label * 5 + slot / cols, col = first_col + slot % cols;
    for (int y = 0; y < 20; ++y)
      for (int x = 0; x < 20; ++x) sheet[(row * 20 + y) * 2000 + col * 20 + x] = ds.images[i * 400 + y * 20 + x];
  };
  for (int64_t i = 0; i < train.count; ++i) place(train, i, train_used[train.labels[i]]++, 0, 80);
  for (int64_t i = 0; i < test.count; ++i) place(test, i, test_used[test.labels[i]]++, 80, 20);

  DigitsSplit split = split_digits(sheet, 2000, 1000);
  EXPECT_EQ(split.train.count, 4000);
  EXPECT_EQ(split.test.count, 1000);
  EXPECT_EQ(multiset(split.train), multiset(train));
  EXPECT_EQ(multiset(split.test), multiset(test));
  // Shuffled, not in sheet order.
  EXPECT_FALSE(std::is_sorted(split.train.labels.begin(), split.train.labels.end()));
  // Deterministic.
  EXPECT_EQ(split_digits(sheet, 2000, 1000).train.labels, split.train.labels);

  TempDir dir;
  make_digits_idx(sheet, 2000, 1000, dir.file("out"));
  Dataset written = load_dataset(dir.file("out"), "idx", true);
  EXPECT_EQ(written.labels, split.train.labels);
  EXPECT_EQ(written.images, split.train.images);
}

TEST(Digits, SplitRejectsWrongSheetSize) {
  std::vector<uint8_t> sheet(1000 * 1000, 0);
  kiln::testing::expect_error([&] { split_digits(sheet, 1000, 1000); }, {"1000x1000"});
}

std::string make_digits_binary() { return KILN_BINARY_DIR "/kiln_make_digits"; }

TEST(Digits, ToolOutputEqualsSharedFilesAsMultisets) {
  if (!have_shared()) GTEST_SKIP() << kShared << " is absent";
  if (!std::filesystem::exists(kPng)) GTEST_SKIP() << kPng << " is absent (apt-get install opencv-doc)";
  if (!std::filesystem::exists(make_digits_binary())) GTEST_SKIP() << make_digits_binary() << " not built";
  TempDir dir;
  std::string out = dir.file("digits");
  ASSERT_EQ(std::system((make_digits_binary() + " '" + out + "' > /dev/null").c_str()), 0);
  for (bool train : {true, false})
    EXPECT_EQ(multiset(load_dataset(out, "idx", train)), multiset(load_dataset(kShared, "idx", train)))
        << (train ? "train" : "test");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(out), {}), 4);  // no temporaries
}

TEST(Digits, ToolFailsCleanlyOnMissingPng) {
  if (!std::filesystem::exists(make_digits_binary())) GTEST_SKIP() << make_digits_binary() << " not built";
  TempDir dir;
  std::string cmd = make_digits_binary() + " '" + dir.file("out") + "' '" + dir.file("none.png") + "' 2> '" +
                    dir.file("err") + "'";
  int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  auto err = read_bytes(dir.file("err"));
  std::string text(err.begin(), err.end());
  EXPECT_NE(text.find("apt-get install opencv-doc"), std::string::npos) << text;
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));

  testing::write_bytes(dir.file("fake.png"), {'n', 'o', 't', ' ', 'p', 'n', 'g'});
  status = std::system((make_digits_binary() + " '" + dir.file("out") + "' '" + dir.file("fake.png") +
                        "' 2> /dev/null").c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
}

}  // namespace
}  // namespace kiln

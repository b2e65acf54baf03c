// `kiln train` refuses, before any training, values that cannot work with the data (a test set of
// another image size, a model that needs larger images) and says so when a run has nothing to
// measure (no test set: no accuracy, never a 0) (issue 20, item 6).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/image/image_codec.h"
#include "support/kiln_cli.h"
#include "support/program_fixture.h"
#include "support/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using kiln::testing::contains;
using kiln::testing::expect_contains;
using kiln::testing::kiln;
using kiln::testing::read_bytes;
using kiln::testing::read_text;
using kiln::testing::Result;
using kiln::testing::TempDir;
using kiln::testing::write_bytes;
using kiln::testing::write_first_digits;

bool have_digits() {
  return fs::exists(kiln::testing::shared_digits_dir() + "/train-images-idx3-ubyte") &&
         fs::exists(kiln::testing::kKilnBinary);
}

// The first `train` digits for training and the first `test` for testing, at `dir`.
std::string digits(const TempDir& tmp, uint32_t train, uint32_t test, const std::string& name = "digits") {
  write_first_digits(kiln::testing::shared_digits_dir(), tmp.file(name), train, test);
  return tmp.file(name);
}

// Replaces the test images of an IDX folder with `count` images of side x side pixels (the
// digits' 20x20 pixels in the top-left corner, the rest black), and their labels.
void write_idx_test_set(const std::string& dir, uint32_t count, uint32_t side) {
  const std::vector<uint8_t> src = read_bytes(kiln::testing::shared_digits_dir() + "/t10k-images-idx3-ubyte");
  const std::vector<uint8_t> labels = read_bytes(kiln::testing::shared_digits_dir() + "/t10k-labels-idx1-ubyte");
  auto be32 = [](std::vector<uint8_t>& out, uint32_t v) {
    for (int i = 3; i >= 0; --i) out.push_back(uint8_t(v >> (8 * i)));
  };
  std::vector<uint8_t> images, label_file;
  be32(images, 0x803), be32(images, count), be32(images, side), be32(images, side);
  for (uint32_t n = 0; n < count; ++n)
    for (uint32_t y = 0; y < side; ++y)
      for (uint32_t x = 0; x < side; ++x)
        images.push_back(y < 20 && x < 20 ? src.at(16 + n * 400 + y * 20 + x) : uint8_t(0));
  be32(label_file, 0x801), be32(label_file, count);
  label_file.insert(label_file.end(), labels.begin() + 8, labels.begin() + 8 + count);
  write_bytes(dir + "/t10k-images-idx3-ubyte", images);
  write_bytes(dir + "/t10k-labels-idx1-ubyte", label_file);
}

// A folder of two classes of `count` side x side RGB PNGs each, at `dir`.
void write_png_classes(const fs::path& dir, int count, int side) {
  for (const char* cls : {"a", "b"}) {
    fs::create_directories(dir / cls);
    for (int i = 0; i < count; ++i) {
      std::vector<uint8_t> p(size_t(side * side * 3));
      for (size_t k = 0; k < p.size(); ++k) p[k] = uint8_t((k * (i + 3) + (cls[0] == 'a' ? 0 : 120)) % 256);
      write_bytes((dir / cls / fmt::format("{}.png", i)).string(), kiln::encode_png(p.data(), side, side, 3));
    }
  }
}

const std::string kCpu = "train --device cpu --workers 1 ";

// Item 6: a test set of another size was found only after a whole epoch, and blamed on the model.
TEST(ValueChecksCli, ATestSetOfAnotherImageSizeIsRefusedBeforeTraining) {
  if (!have_digits()) GTEST_SKIP() << "no digits or no kiln binary";
  TempDir tmp;
  const std::string data = digits(tmp, 512, 64);
  write_idx_test_set(data, 64, 28);
  const std::string args = kCpu + "--data " + data + " --epochs 1 --batch 64";
  const Result r = kiln(args);
  EXPECT_EQ(r.rc, 2) << r.output;
  expect_contains(r, {"the test set (" + data + "/t10k-images-idx3-ubyte) has 28x28x1 images",
                      "the training set of " + data + " has 20x20x1", "Give a test set of 20x20x1 images",
                      "nothing was trained"},
                  args);
  EXPECT_FALSE(contains(r.output, "epoch 1/1")) << r.output;
  EXPECT_FALSE(contains(r.output, "pick a model")) << r.output;

  // An image folder whose val/ images are smaller than train/'s (--transform plain keeps sizes).
  write_png_classes(tmp.path() / "set" / "train", 4, 24);
  write_png_classes(tmp.path() / "set" / "val", 2, 16);
  const std::string folder = kCpu + "--model resnet18 --epochs 1 --batch 4 --transform plain --data " +
                             tmp.file("set");
  const Result f = kiln(folder);
  EXPECT_EQ(f.rc, 2) << f.output;
  expect_contains(f, {"the validation folder " + tmp.file("set") + "/val has 16x16x3 images", "24x24x3",
                      "--transform imagenet"},
                  folder);
  EXPECT_FALSE(contains(f.output, "epoch 1/1")) << f.output;
}

// Item 6: an empty test set printed "test acc 0.0000" every epoch and wrote 0 into the JSON.
TEST(ValueChecksCli, NoTestSetMeansNoAccuracyNeverAZero) {
  if (!have_digits()) GTEST_SKIP() << "no digits or no kiln binary";
  TempDir tmp;
  const std::string data = digits(tmp, 512, 64);
  write_idx_test_set(data, 0, 20);
  const std::string json = tmp.file("run.jsonl");
  const std::string args = kCpu + "--data " + data + " --epochs 2 --batch 64 --json " + json;
  const Result r = kiln(args);
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"kiln: no test set: the test set (" + data + "/t10k-images-idx3-ubyte) holds no images",
                      "\nepoch 1/2  loss", "\nepoch 2/2  loss",
                      "no test set: test accuracy not measured"},
                  args);
  EXPECT_FALSE(contains(r.output, "  test acc ")) << r.output;
  EXPECT_FALSE(contains(r.output, "0.0000")) << r.output;
  EXPECT_EQ(kiln::testing::test_accuracy(r), -1.0) << r.output;
  const std::string lines = read_text(json);
  ASSERT_EQ(std::count(lines.begin(), lines.end(), '\n'), 2) << lines;
  const nlohmann::json first = nlohmann::json::parse(lines.substr(0, lines.find('\n')));
  EXPECT_TRUE(first.at("test_accuracy").is_null()) << first.dump();
  EXPECT_TRUE(first.at("test_top5_accuracy").is_null()) << first.dump();
  EXPECT_GT(first.at("train_accuracy").get<double>(), 0.0);

  // An image folder without val/ trains (by design), saying why there is no accuracy.
  write_png_classes(tmp.path() / "classes", 4, 16);
  const std::string folder = kCpu + "--model resnet18 --epochs 1 --batch 4 --transform plain --data " +
                             tmp.file("classes");
  const Result f = kiln(folder);
  ASSERT_EQ(f.rc, 0) << f.output;
  expect_contains(f, {"kiln: no test set: " + tmp.file("classes") + " has no validation folder", "--val DIR",
                      "\nepoch 1/1  loss", "no test set: test accuracy not measured"},
                  folder);
  EXPECT_FALSE(contains(f.output, "  test acc ")) << f.output;
  EXPECT_FALSE(contains(f.output, "no better than chance")) << "8 images cannot tell:\n" << f.output;
}

// Item 6: vgg16_bn_cifar on 20x20 digits failed in "maxpool 'features.17'", advising kernel changes.
TEST(ValueChecksCli, AModelThatNeedsLargerImagesSaysHowLarge) {
  if (!have_digits()) GTEST_SKIP() << "no digits or no kiln binary";
  TempDir tmp;
  const std::string data = digits(tmp, 64, 16);
  for (const std::string model : {"vgg16_bn_cifar", "vgg16_bn"}) {
    const std::string args = kCpu + "--model " + model + " --data " + data + " --epochs 1 --batch 8";
    const Result r = kiln(args);
    EXPECT_EQ(r.rc, 2) << r.output;
    expect_contains(r, {"model '" + model + "' needs images of at least 32x32 but " + data + " holds 20x20 images",
                        "--model digits_cnn", "resnet18_cifar", "or images of at least 32x32"},
                    args);
    EXPECT_FALSE(contains(r.output, "features.17")) << r.output;
    EXPECT_FALSE(contains(r.output, "smaller kernel")) << r.output;
    EXPECT_FALSE(contains(r.output, "kiln: training")) << r.output;
  }
}

}  // namespace

// What `kiln train` says of data whose classes make no sense, and of a test set that fails after an
// epoch has trained: damaged IDX label bytes (12 and 255 among the digits' 0..9) are refused, not
// trained as 256 classes; a class without a training sample is warned about; one class is refused in
// the data's own terms; a validation file that cannot be decoded at the first evaluation costs
// nothing of the epoch trained before it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/data.h"
#include "support/kiln_cli.h"
#include "support/program_fixture.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::expect_contains;
using testing::kiln;
using testing::Result;
using testing::TempDir;

const std::string kTrain = "train --model digits_cnn --device cpu --workers 0 --epochs 1 --batch 64 --data ";

// The digits as IDX files in `dir`, after `edit` has changed their labels.
template <class Edit>
void write_digits(const std::string& dir, Edit edit) {
  Dataset train = load_dataset(testing::shared_digits_dir(), "idx", true);
  Dataset test = load_dataset(testing::shared_digits_dir(), "idx", false);
  edit(train, test);
  fs::create_directories(dir);
  write_idx(train, dir + "/train-images-idx3-ubyte", dir + "/train-labels-idx1-ubyte");
  write_idx(test, dir + "/t10k-images-idx3-ubyte", dir + "/t10k-labels-idx1-ubyte");
}

TEST(DataLabelsCli, DamagedTrainingLabelBytesAreRefusedNotTrainedAs256Classes) {
  TempDir dir;
  const std::string data = dir.file("digits");
  write_digits(data, [](Dataset& train, Dataset&) { train.labels[57] = 12, train.labels[900] = 255; });
  const Result r = kiln(kTrain + data);
  EXPECT_NE(r.rc, 0) << r.output;
  expect_contains(r, {"train-labels-idx1-ubyte' run up to 255, which makes 256 classes", "244 of them have no",
                      "classes 10-11, 13-254", "Labels 0-9 hold 3998 of the 4000 samples",
                      "12 (1 sample, the first at record 57), 255 (1 sample, the first at record 900)"},
                  kTrain + data);
  EXPECT_EQ(r.output.find("epoch 1/1"), std::string::npos) << "nothing may train:\n" << r.output;
}

TEST(DataLabelsCli, TestLabelsBeyondTheTrainingClassesAreRefused) {
  TempDir dir;
  const std::string data = dir.file("digits");
  write_digits(data, [](Dataset&, Dataset& test) { test.labels[3] = 12; });
  const Result r = kiln(kTrain + data);
  EXPECT_NE(r.rc, 0) << r.output;
  expect_contains(r, {"t10k-labels-idx1-ubyte' include classes the training labels", "classes 0-9",
                      "12 (1 sample, the first at record 3)"},
                  kTrain + data);
}

// A class in the range without a sample trains (EMNIST letters number theirs 1..26), with a warning.
TEST(DataLabelsCli, AClassWithoutTrainingSamplesIsWarnedAbout) {
  TempDir dir;
  const std::string data = dir.file("digits");
  write_digits(data, [](Dataset& train, Dataset& test) {
    for (Dataset* d : {&train, &test}) {  // 512 of each, for a short epoch
      d->count = 512, d->images.resize(size_t(512 * d->image_size())), d->labels.resize(512);
      for (int32_t& l : d->labels) l = l == 4 ? 5 : l;
    }
  });
  const Result r = kiln(kTrain + data);
  EXPECT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"warning: 1 of the 10 classes", "have no training sample: class 4.", "test accuracy: "},
                  kTrain + data);
}

TEST(DataLabelsCli, OneClassOfDigitsIsRefused) {
  TempDir dir;
  const std::string data = dir.file("digits");
  write_digits(data, [](Dataset& train, Dataset& test) {
    for (int32_t& l : train.labels) l = 0;
    for (int32_t& l : test.labels) l = 0;
  });
  const Result r = kiln(kTrain + data);
  EXPECT_NE(r.rc, 0) << r.output;
  expect_contains(r, {"holds one class", "a model learns nothing", "at least two classes"}, kTrain + data);
}

// PNG digits copied into `root`/<split>/<class>/: `per_class` of each of the classes named.
void copy_png_digits(const fs::path& root, const std::string& split, const std::vector<std::string>& classes,
                     int per_class) {
  for (const std::string& c : classes) {
    const fs::path from = fs::path(KILN_SOURCE_DIR) / "data/digits_png" / split / c;
    fs::create_directories(root / c);
    int n = 0;
    for (const auto& e : fs::directory_iterator(from)) {
      if (n++ == per_class) break;
      fs::copy_file(e.path(), root / c / e.path().filename());
    }
  }
}

const std::string kPngTrain =
    "train --model digits_cnn --device cpu --workers 0 --transform plain --channels 1 --batch 8 --data ";

TEST(DataLabelsCli, AnImageFolderOfOneClassIsRefusedNamingTheFolderToGive) {
  TempDir dir;
  // The class folders one level down, under images/: --data names their parent's parent.
  copy_png_digits(dir.path() / "photos" / "images", "train", {"0", "1"}, 8);
  const std::string too_high = dir.file("photos");
  Result r = kiln(kPngTrain + too_high);
  EXPECT_NE(r.rc, 0) << r.output;
  expect_contains(r, {"holds one class folder, 'images'", "give it as the data (--data " + too_high + "/images)"},
                  kPngTrain + too_high);
  // The classes themselves: one folder of images.
  copy_png_digits(dir.path() / "one", "train", {"3"}, 8);
  r = kiln(kPngTrain + dir.file("one"));
  EXPECT_NE(r.rc, 0) << r.output;
  expect_contains(r, {"holds one class folder, '3'", "needs at least two classes"}, kPngTrain + dir.file("one"));
}

// --data at one class's folder of images (one level too deep): the folder above is named.
TEST(DataLabelsCli, AFolderOfImagesWithoutClassFoldersNamesTheFolderAbove) {
  TempDir dir;
  copy_png_digits(dir.path() / "digits", "train", {"0", "1"}, 4);
  const std::string too_deep = dir.file("digits/1");
  const Result r = kiln(kPngTrain + too_deep);
  EXPECT_NE(r.rc, 0) << r.output;
  expect_contains(r, {"holds 4 images but no class subfolders", "give the folder above it (--data " +
                                                                     dir.file("digits") + ")"},
                  kPngTrain + too_deep);
}

// Flips a byte inside the first IDAT chunk's data: the header and the IEND trailer stay intact (a
// check of a file's ends passes it) and libpng's CRC check fails it at decoding.
void damage_png_data(const std::string& path) {
  std::vector<uint8_t> bytes = testing::read_bytes(path);
  for (size_t at = 8; at + 12 <= bytes.size();) {
    const uint32_t length = uint32_t(bytes[at]) << 24 | uint32_t(bytes[at + 1]) << 16 | uint32_t(bytes[at + 2]) << 8 |
                            uint32_t(bytes[at + 3]);
    if (std::string(bytes.begin() + long(at) + 4, bytes.begin() + long(at) + 8) == "IDAT" && length > 2) {
      bytes[at + 8 + length / 2] ^= 0x5a;
      testing::write_bytes(path, bytes);
      return;
    }
    at += 12 + length;
  }
  FAIL() << path << " has no IDAT chunk";
}

TEST(DataLabelsCli, AValidationFileThatFailsAtEvaluationCostsNothingOfTheTrainedEpoch) {
  TempDir dir;
  const fs::path data = dir.path() / "digits";
  copy_png_digits(data / "train", "train", {"0", "1"}, 16);
  copy_png_digits(data / "val", "val", {"0", "1"}, 4);
  const fs::path bad = *fs::directory_iterator(data / "val" / "1");
  damage_png_data(bad.string());
  const std::string ckpt = dir.file("run.safetensors"), json = dir.file("run.jsonl");
  const std::string args = kPngTrain + data.string() + " --epochs 2 --checkpoint " + ckpt + " --json " + json;
  Result r = kiln(args);
  EXPECT_NE(r.rc, 0) << r.output;
  expect_contains(r, {"the evaluation on the test set after epoch 1/2 failed", bad.filename().string(),
                      "checkpoint '" + ckpt + "' holds epoch 1", "resume with --resume"},
                  args);
  EXPECT_TRUE(fs::exists(ckpt)) << "the trained epoch's checkpoint is written before the evaluation";
  std::ifstream lines(json);
  std::string line;
  ASSERT_TRUE(std::getline(lines, line)) << "the epoch's --json line is written too";
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["epoch"], 1);
  EXPECT_TRUE(j["test_accuracy"].is_null());
  EXPECT_NE(j["eval_error"].get<std::string>().find(bad.filename().string()), std::string::npos);

  // The run continues from that epoch, leaving the file out.
  r = kiln(args + " --resume --skip-bad");
  EXPECT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"resumed from " + ckpt + ": epoch 1 of 2 done", "epoch 2/2", "skipped 1 unreadable sample",
                      "test accuracy: "},
                  args + " --resume --skip-bad");
}

}  // namespace
}  // namespace kiln

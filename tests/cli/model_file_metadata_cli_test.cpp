// kiln train --model net.onnx takes what kiln export wrote into the file of the data its weights were
// trained on (issue 50, item 2): its normalization (metadata norm_mean, norm_std) under --normalize
// auto, and its class names (class_names), which data naming none takes and data naming others is
// refused for unless --new-head. A value kiln cannot use is refused naming the file, the key and the
// fix. The checkpoint records what the run used, so eval and predict keep it.
//
// The normalization is seen in accuracy: a digits_cnn trained on the PNG digits with ImageNet's
// mean/std (not what --normalize auto picks for them, the data's own) and exported with its BatchNorm
// folded into the convolutions (so that no running statistic can adapt to other inputs during a run)
// keeps its accuracy only when its inputs are normalized as in training.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/onnx_metadata_edit.h"
#include "kiln/safetensors.h"
#include "support/kiln_cli.h"
#include "support/program_fixture.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::expect_contains;
using testing::kiln;
using testing::Result;

const std::string kDigitsPng = KILN_SOURCE_DIR "/data/digits_png";
// Learning rate 1e-7: a run that changes no weight measurably, so its test accuracy is where it started.
const std::string kStill = "train --device cpu --batch 64 --workers 1 --seed 3 --epochs 1 --lr 1e-7 ";
const std::vector<std::string> kWords = {"zero", "one", "two", "three", "four",
                                         "five", "six", "seven", "eight", "nine"};

std::string json_names(const std::vector<std::string>& names) { return nlohmann::json(names).dump(); }

// A checkpoint's "norm_mean" or "norm_std" as numbers.
std::vector<float> recorded_floats(const std::string& checkpoint, const std::string& key) {
  const std::map<std::string, std::string> metadata = load_safetensors(checkpoint).metadata;
  std::vector<float> v;
  const auto it = metadata.find(key);
  if (it == metadata.end()) return v;
  std::istringstream in(it->second);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::strtof(item.c_str(), nullptr));
  return v;
}

void expect_floats_near(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << what << " [" << i << "]";
}

// PNGs of digit `digit` of the validation split, for kiln predict.
std::vector<std::string> digit_pngs(int digit, size_t count) {
  std::vector<std::string> files;
  const fs::path dir = kDigitsPng + "/val/" + std::to_string(digit);
  if (!fs::exists(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  files.resize(std::min(files.size(), count));
  return files;
}

// Two trained models and their files, made once for the suite: a digits_cnn on the gray IDX digits
// (1 channel, the data's normalization, no class names), exported with BatchNorm kept, and one on
// the PNG digits as RGB with ImageNet's normalization (class names '0' to '9'), exported folded.
class ModelFileMetadataCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("kiln_ModelFileMetadataCli_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    const std::string digits = testing::shared_digits_dir();
    if (!fs::exists(digits + "/t10k-images-idx3-ubyte") || !fs::exists(kDigitsPng)) return;  // SetUp says so
    testing::write_first_digits(digits, file("digits"), 640, 300);
    const std::string train = "train --device cpu --model digits_cnn --batch 64 --workers 1 --epochs 1 ";
    runs_ = new std::vector<Result>;
    runs_->push_back(kiln(train + "--data " + digits + " --checkpoint " + file("idx.safetensors")));
    runs_->push_back(kiln("export --keep-bn --checkpoint " + file("idx.safetensors") + " --onnx " + file("idx.onnx")));
    runs_->push_back(kiln(train + "--data " + kDigitsPng + " --normalize imagenet --checkpoint " +
                          file("png.safetensors")));
    runs_->push_back(kiln("export --fold-bn --checkpoint " + file("png.safetensors") + " --onnx " + file("png.onnx")));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete runs_;
    delete dir_;
  }
  static std::string file(const std::string& name) { return (*dir_ / name).string(); }

  void SetUp() override {
    ASSERT_TRUE(fs::exists(testing::shared_digits_dir() + "/t10k-images-idx3-ubyte") && fs::exists(kDigitsPng))
        << "no digits at " << testing::shared_digits_dir() << " or " << kDigitsPng << ": run scripts/setup.sh";
    for (const Result& r : *runs_) ASSERT_EQ(r.rc, 0) << r.output;
    png_accuracy_ = testing::test_accuracy((*runs_)[2]);
    ASSERT_GT(png_accuracy_, 0.8) << (*runs_)[2].output;
  }

  // The file `from` as `name` with its metadata changed: `set` entries written, `drop` keys removed.
  static std::string edited(const std::string& from, const std::string& name,
                            const std::map<std::string, std::string>& set, const std::vector<std::string>& drop = {}) {
    std::map<std::string, std::string> metadata = testing::onnx_metadata(from);
    for (const auto& [key, value] : set) metadata[key] = value;
    for (const std::string& key : drop) metadata.erase(key);
    testing::write_with_metadata(from, file(name), metadata);
    return file(name);
  }

  static fs::path* dir_;
  static std::vector<Result>* runs_;
  double png_accuracy_ = 0;
};

fs::path* ModelFileMetadataCli::dir_ = nullptr;
std::vector<Result>* ModelFileMetadataCli::runs_ = nullptr;

TEST_F(ModelFileMetadataCli, ExportWritesWhatTheRunsUsed) {
  const std::map<std::string, std::string> png = testing::onnx_metadata(file("png.onnx"));
  EXPECT_EQ(png.at("norm_mean"), "0.485000014,0.456,0.405999988");
  EXPECT_EQ(png.at("norm_std"), "0.229000002,0.224000007,0.224999994");
  EXPECT_EQ(png.at("class_names"), json_names({"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));
  const std::map<std::string, std::string> idx = testing::onnx_metadata(file("idx.onnx"));
  EXPECT_EQ(idx.count("class_names"), 0u);  // IDX data names no classes
  EXPECT_EQ(idx.count("norm_mean"), 1u);
  // The edit helper rewrites nothing but the metadata: the file still plans as before.
  const std::string same = edited(file("png.onnx"), "same.onnx", {});
  EXPECT_EQ(testing::onnx_metadata(same), png);
  const Result plan = kiln("plan --device cpu --model " + same);
  EXPECT_EQ(plan.rc, 0) << plan.output;
}

// --normalize auto picks the PNG digits' own statistics (plain transform); the file says ImageNet's,
// which its weights expect: they keep the trained accuracy, the data's lose it.
TEST_F(ModelFileMetadataCli, TrainsWithTheFilesNormalizationUnlessToldOtherwise) {
  const std::string run = kStill + "--data " + kDigitsPng + " --model " + file("png.onnx") + " --checkpoint ";
  const Result from_file = kiln(run + file("auto.safetensors"));
  ASSERT_EQ(from_file.rc, 0) << from_file.output;
  expect_contains(from_file,
                  {file("png.onnx") + ": normalizing with the file's mean 0.485,0.456,0.406 and std "
                                      "0.229,0.224,0.225, which its weights were trained with",
                   "--normalize dataset or imagenet normalizes otherwise"},
                  "train --model png.onnx");
  const double kept = testing::test_accuracy(from_file);
  EXPECT_NEAR(kept, png_accuracy_, 0.01) << from_file.output;
  // The checkpoint records the normalization used, and eval takes it from there.
  expect_floats_near(recorded_floats(file("auto.safetensors"), "norm_mean"), {0.485f, 0.456f, 0.406f}, "norm_mean");
  expect_floats_near(recorded_floats(file("auto.safetensors"), "norm_std"), {0.229f, 0.224f, 0.225f}, "norm_std");
  const Result eval = kiln("eval --device cpu --checkpoint " + file("auto.safetensors"));
  ASSERT_EQ(eval.rc, 0) << eval.output;
  EXPECT_EQ(testing::test_accuracy(eval), kept) << eval.output;

  const Result dataset = kiln(run + file("dataset.safetensors") + " --normalize dataset");
  ASSERT_EQ(dataset.rc, 0) << dataset.output;
  expect_contains(dataset,
                  {"--normalize dataset: normalizing as it says, not with the file's mean "
                   "0.485000014,0.456,0.405999988 and std 0.229000002,0.224000007,0.224999994 (its metadata), which "
                   "its weights were trained with"},
                  "--normalize dataset");
  EXPECT_EQ(dataset.output.find("normalizing with the file's"), std::string::npos) << dataset.output;
  // Measured: 0.946 trained and from the file's normalization, 0.818 from the data's on one 2-core
  // Xeon; 0.938 and 0.860 on another (the png model trains to other weights on other kernels).
  // The convolutions' biases expect ImageNet's offset, and a folded model has no BatchNorm to absorb
  // another. The mistake this catches, --normalize ignored, is the same run as `from_file` (same seed,
  // weights, data and lr 1e-7): the same accuracy to the last image, so any clear gap tells them apart.
  EXPECT_LT(testing::test_accuracy(dataset), kept - 0.03) << dataset.output;
  // The bound holds that mistake apart: --normalize imagenet is the file's own normalization (the png
  // model was trained with ImageNet's), so its run is what an ignored --normalize dataset would give.
  const Result same_as_file = kiln(run + file("imagenet.safetensors") + " --normalize imagenet");
  ASSERT_EQ(same_as_file.rc, 0) << same_as_file.output;
  EXPECT_GE(testing::test_accuracy(same_as_file), kept - 0.03) << same_as_file.output;
  const std::vector<float> data_mean = recorded_floats(file("dataset.safetensors"), "norm_mean");
  ASSERT_EQ(data_mean.size(), 3u);
  EXPECT_LT(data_mean[0], 0.3f);  // the digits' own: mostly black
  // --no-weights owes the file's normalization nothing: kiln's initialization, the data's statistics.
  const Result fresh = kiln(kStill + "--data " + kDigitsPng + " --model " + file("png.onnx") + " --no-weights");
  ASSERT_EQ(fresh.rc, 0) << fresh.output;
  EXPECT_EQ(fresh.output.find("normalizing with the file's"), std::string::npos) << fresh.output;
}

// IDX digits name no classes: the run takes the file's, its checkpoint records them, and eval and
// predict print them.
TEST_F(ModelFileMetadataCli, DataNamingNoClassesTakesTheFilesNames) {
  const std::string named = edited(file("idx.onnx"), "named.onnx", {{"class_names", json_names(kWords)}});
  const std::string ck = file("named.safetensors");
  const Result trained = kiln(kStill + "--data " + file("digits") + " --model " + named + " --checkpoint " + ck);
  ASSERT_EQ(trained.rc, 0) << trained.output;
  expect_contains(trained,
                  {named + ": the data names no classes: its labels 0 to 9 take the names of the file's metadata "
                           "class_names, 'zero', 'one', 'two', 'three', 'four', ... (10 names), which the checkpoint "
                           "records for eval and predict"},
                  "train on IDX");
  EXPECT_EQ(load_safetensors(ck).metadata.at("class_names"), json_names(kWords));

  const Result eval = kiln("eval --device cpu --json --checkpoint " + ck);
  ASSERT_EQ(eval.rc, 0) << eval.output;
  // Its per-class entries in label order, named by the file.
  const nlohmann::ordered_json report = nlohmann::ordered_json::parse(eval.output.substr(eval.output.find('{')));
  std::vector<std::string> per_class;
  int64_t counted = 0;
  for (const auto& [name, counts] : report.at("per_class").items()) {
    per_class.push_back(name);
    counted += counts.at("count").get<int64_t>();
  }
  EXPECT_EQ(per_class, kWords) << eval.output;
  EXPECT_EQ(counted, 300) << eval.output;  // the 300 test digits the run was trained beside

  // Ten images of a 3: each ranked class is the file's name of its index, and most are 'three'.
  const std::vector<std::string> threes = digit_pngs(3, 10);
  ASSERT_EQ(threes.size(), 10u) << "data/digits_png is missing: run scripts/setup.sh";
  std::string images;
  for (const std::string& f : threes) images += " " + f;
  const Result predicted = kiln("predict --device cpu --json --top 10 --checkpoint " + ck + images);
  ASSERT_EQ(predicted.rc, 0) << predicted.output;
  const nlohmann::json p = nlohmann::json::parse(predicted.output.substr(predicted.output.find('{')));
  int threes_first = 0;
  std::string a_three;  // an image the model takes for a 3
  for (const auto& image : p.at("predictions")) {
    ASSERT_EQ(image.at("top").size(), 10u);
    for (const auto& ranked : image.at("top"))
      EXPECT_EQ(ranked.at("class"), kWords.at(ranked.at("index").get<size_t>())) << predicted.output;
    if (image.at("top")[0].at("class") != "three") continue;
    ++threes_first;
    a_three = image.at("image").get<std::string>();
  }
  EXPECT_GE(threes_first, 7) << predicted.output;
  ASSERT_FALSE(a_three.empty()) << predicted.output;
  const Result text = kiln("predict --device cpu --top 1 --checkpoint " + ck + " " + a_three);
  ASSERT_EQ(text.rc, 0) << text.output;
  EXPECT_NE(text.output.find("  1. three  "), std::string::npos) << text.output;
}

// The PNG folders name their classes '0' to '9'. A file naming them otherwise keeps its last layer
// only for data of its own classes: other names are refused, --new-head trains that layer anew.
TEST_F(ModelFileMetadataCli, DataNamingOtherClassesIsRefusedUnlessNewHead) {
  const std::string words = edited(file("png.onnx"), "words.onnx", {{"class_names", json_names(kWords)}});
  const std::string run = kStill + "--data " + kDigitsPng + " --model ";
  const Result refused = kiln(run + words);
  EXPECT_NE(refused.rc, 0) << refused.output;
  expect_contains(refused,
                  {"'" + kDigitsPng + "' names its classes otherwise than --model '" + words +
                       "', whose last layer was trained on the file's classes: the data's class 0 is '0', the "
                       "file's 'zero'. Training would teach the output for 'zero' to mean '0'. Give --new-head",
                   "or train on data of the file's classes ('zero', 'one', 'two', 'three', 'four', ... (10 names))"},
                  "other class names");
  const std::string swapped = edited(file("png.onnx"), "swapped.onnx",
                                     {{"class_names", json_names({"1", "0", "2", "3", "4", "5", "6", "7", "8", "9"})}});
  const Result reordered = kiln(run + swapped);
  EXPECT_NE(reordered.rc, 0) << reordered.output;
  expect_contains(reordered,
                  {"the data's class 0 is '0', the file's '1' (the same names in another order: kiln labels class "
                   "folders in the sorted order of their names)"},
                  "the same names reordered");

  const Result new_head = kiln(run + words + " --new-head");
  ASSERT_EQ(new_head.rc, 0) << new_head.output;
  expect_contains(new_head,
                  {"initialized from the weights of " + words + ": 10 tensors (--new-head: the last linear layer "
                                                                "starts from kiln's initialization); left out: "
                                                                "fc2.bias, fc2.weight",
                   "normalizing with the file's mean 0.485,0.456,0.406"},
                  "--new-head");
  EXPECT_LT(testing::test_accuracy(new_head), png_accuracy_ - 0.4) << new_head.output;  // an untrained head
  // Without a model file to take it from, --new-head still needs --init-from.
  const Result zoo = kiln(kStill + "--data " + kDigitsPng + " --model digits_cnn --new-head");
  EXPECT_NE(zoo.rc, 0);
  expect_contains(zoo, {"--new-head needs --init-from FILE or --model FILE.onnx"}, "--new-head of a zoo model");
}

// The checkpoint's side of the same comparison (cli/class_name_lists.h, shared with the file's):
// eval refuses data whose class folders are named otherwise, naming the first label that differs.
TEST_F(ModelFileMetadataCli, EvalRefusesDataNamingOtherClassesThanTheCheckpoint) {
  const fs::path renamed = *dir_ / "renamed";
  for (const std::string split : {"train", "val"})
    for (int d = 0; d < 10; ++d) {
      const fs::path folder = renamed / split / kWords[size_t(d)];
      fs::create_directories(folder);
      const std::vector<std::string> pngs = digit_pngs(d, 2);
      ASSERT_EQ(pngs.size(), 2u);
      for (const std::string& png : pngs) fs::copy_file(png, folder / fs::path(png).filename());
    }
  const Result r = kiln("eval --device cpu --checkpoint " + file("png.safetensors") + " --data " + renamed.string());
  EXPECT_NE(r.rc, 0) << r.output;
  // The folders in sorted order: 'eight' is label 0.
  expect_contains(r,
                  {fmt::format("'{}' holds other classes than the checkpoint '{}' was trained on: its class 0 is "
                               "'eight', the checkpoint's '0'; labels would not match",
                               renamed.string(), file("png.safetensors"))},
                  "eval on renamed classes");
}

TEST_F(ModelFileMetadataCli, MalformedMetadataIsRefusedNamingTheFileTheKeyAndTheFix) {
  struct Case {
    std::string name;
    std::map<std::string, std::string> set;
    std::vector<std::string> drop, expected;
  };
  const std::string normalize_fix =
      "Give --normalize imagenet or dataset to normalize otherwise, which does not read it";
  const std::vector<Case> cases = {
      {"count", {{"norm_mean", "0.1,0.2"}}, {},
       {"its metadata 'norm_mean' holds 2 numbers ('0.1,0.2'), but the model's input has 1 channel", normalize_fix,
        "m.metadata_props"}},
      {"text", {{"norm_mean", "abc"}}, {},
       {"its metadata 'norm_mean' is 'abc', and 'abc' is not a number", normalize_fix}},
      {"empty", {{"norm_std", ""}}, {}, {"its metadata 'norm_std' is '', and '' is not a number"}},
      {"zero_std", {{"norm_std", "0"}}, {},
       {"its metadata 'norm_std' is '0', whose channel 0 is 0: a standard deviation must be a finite number > 0",
        normalize_fix}},
      {"negative_std", {{"norm_std", "-0.3"}}, {}, {"whose channel 0 is -0.3: a standard deviation must be"}},
      {"nan_mean", {{"norm_mean", "nan"}}, {}, {"its metadata 'norm_mean' is 'nan', whose channel 0 is nan: a mean"}},
      {"no_std", {}, {"norm_std"}, {"its metadata holds 'norm_mean' but no 'norm_std'", normalize_fix}},
      {"names_object", {{"class_names", "{\"0\":\"zero\"}"}}, {},
       {"its metadata 'class_names' is '{\"0\":\"zero\"}', not a JSON array of names", "m.metadata_props"}},
      {"names_count", {{"class_names", json_names({"a", "b", "c"})}}, {},
       {"its metadata 'class_names' names 3 classes ('a', 'b', 'c'), but the model gives 10 outputs"}},
  };
  for (const Case& c : cases) {
    const std::string bad = edited(file("idx.onnx"), c.name + ".onnx", c.set, c.drop);
    const Result r = kiln(kStill + "--data " + file("digits") + " --model " + bad);
    EXPECT_NE(r.rc, 0) << c.name << "\n" << r.output;
    std::vector<std::string> expected = {"--model '" + bad + "': "};
    expected.insert(expected.end(), c.expected.begin(), c.expected.end());
    expect_contains(r, expected, c.name);
    EXPECT_EQ(r.output.find("epoch 1/1"), std::string::npos) << c.name << ": refused before training\n" << r.output;
  }
  // What a run does not read cannot stop it: --normalize dataset leaves the file's normalization
  // aside, --no-weights the file's class names (its last layer is kiln's).
  const std::string bad_std = edited(file("idx.onnx"), "bad_std.onnx", {{"norm_std", "0"}});
  const Result dataset = kiln(kStill + "--data " + file("digits") + " --model " + bad_std + " --normalize dataset");
  EXPECT_EQ(dataset.rc, 0) << dataset.output;
  expect_contains(dataset,
                  {"--normalize dataset: normalizing as it says, not with the file's mean ", " and std 0 (its"},
                  "--normalize dataset");
  const std::string bad_names = edited(file("idx.onnx"), "bad_names.onnx", {{"class_names", "[1,2]"}});
  const Result fresh = kiln(kStill + "--data " + file("digits") + " --model " + bad_names + " --no-weights");
  EXPECT_EQ(fresh.rc, 0) << fresh.output;
}

}  // namespace
}  // namespace kiln

// kiln eval --model FILE.onnx and kiln predict --model FILE.onnx (issue 50, item 3): a model file's
// weights evaluated as they are, with no training run between. The file is kiln's export of a
// digits_cnn trained on the PNG digits with ImageNet's normalization and its BatchNorm folded into
// the convolutions: the same function as its checkpoint, so the file's evaluation and prediction
// must give the checkpoint's, from the normalization and class names the file records. A copy with
// that metadata taken out stands for PyTorch's exports, which record none.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/onnx_metadata_edit.h"
#include "core/file_io.h"
#include "data/image/image_codec.h"
#include "support/kiln_cli.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::expect_contains;
using testing::kiln;
using testing::Result;

const std::string kDigitsPng = KILN_SOURCE_DIR "/data/digits_png";
const std::string kFileNorm = "normalizing with the file's mean 0.485,0.456,0.406 and std 0.229,0.224,0.225";
const std::string kNoRecord = "the file does not record how its inputs were normalized";

nlohmann::json json_of(const Result& r) {
  const size_t at = r.output.find('{');
  EXPECT_NE(at, std::string::npos) << r.output;
  return nlohmann::json::parse(r.output.substr(at == std::string::npos ? 0 : at));
}

// The first `count` PNGs of each digit's validation folder.
std::string val_pngs(size_t count) {
  std::string list;
  for (int d = 0; d < 10; ++d) {
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(kDigitsPng + "/val/" + std::to_string(d)))
      files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (size_t i = 0; i < std::min(count, files.size()); ++i) list += " " + files[i];
  }
  return list;
}

class ModelFileEvalCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("kiln_ModelFileEvalCli_" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    if (!fs::exists(kDigitsPng)) return;  // SetUp says so
    runs_ = new std::vector<Result>;
    runs_->push_back(kiln("train --device cpu --model digits_cnn --batch 64 --workers 1 --epochs 1 --seed 5 --data " +
                          kDigitsPng + " --normalize imagenet --checkpoint " + file("png.safetensors")));
    runs_->push_back(kiln("export --fold-bn --checkpoint " + file("png.safetensors") + " --onnx " + file("png.onnx")));
    std::map<std::string, std::string> metadata = testing::onnx_metadata(file("png.onnx"));
    for (const char* key : {"norm_mean", "norm_std", "class_names"}) metadata.erase(key);
    testing::write_with_metadata(file("png.onnx"), file("bare.onnx"), metadata);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete runs_;
    delete dir_;
  }
  static std::string file(const std::string& name) { return (*dir_ / name).string(); }

  void SetUp() override {
    ASSERT_TRUE(fs::exists(kDigitsPng)) << "no digits at " << kDigitsPng << ": run scripts/setup.sh";
    for (const Result& r : *runs_) ASSERT_EQ(r.rc, 0) << r.output;
  }

  static fs::path* dir_;
  static std::vector<Result>* runs_;
};

fs::path* ModelFileEvalCli::dir_ = nullptr;
std::vector<Result>* ModelFileEvalCli::runs_ = nullptr;

TEST_F(ModelFileEvalCli, EvalOfTheFileIsEvalOfItsCheckpoint) {
  const Result checkpoint = kiln("eval --device cpu --json --checkpoint " + file("png.safetensors"));
  ASSERT_EQ(checkpoint.rc, 0) << checkpoint.output;
  const Result model = kiln("eval --device cpu --json --model " + file("png.onnx") + " --data " + kDigitsPng);
  ASSERT_EQ(model.rc, 0) << model.output;
  expect_contains(model, {kFileNorm}, "eval --model png.onnx");
  const nlohmann::json want = json_of(checkpoint), got = json_of(model);
  EXPECT_EQ(got.at("model_file"), file("png.onnx"));
  EXPECT_TRUE(got.at("checkpoint").is_null());
  EXPECT_EQ(got.at("model"), "digits_cnn");
  EXPECT_EQ(got.at("images"), 1000);
  ASSERT_GT(want.at("top1").get<double>(), 0.8) << checkpoint.output;  // a trained model: the check can fail
  // BatchNorm folded into the convolutions in float32: the logits move by rounding, the accuracy by
  // at most an image whose top two logits were that close.
  EXPECT_NEAR(got.at("top1").get<double>(), want.at("top1").get<double>(), 0.0015);
  EXPECT_NEAR(got.at("loss").get<double>(), want.at("loss").get<double>(), 1e-4 * want.at("loss").get<double>());
  // The class names: the data's and the file's, '0' to '9', in label order.
  std::vector<std::string> names;
  for (const auto& [name, counts] : got.at("per_class").items()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}));
}

// A file that records no normalization (as PyTorch's) is normalized as kiln train would normalize
// the data, and says so: here the PNG digits' own statistics (the plain transform), not the ImageNet
// ones the weights were trained with, so the accuracy drops; --normalize imagenet restores it.
TEST_F(ModelFileEvalCli, AFileThatDoesNotSayIsNormalizedAsTheDataWouldBeAndSaysSo) {
  const std::string run = "eval --device cpu --json --model " + file("bare.onnx") + " --data " + kDigitsPng;
  const Result guessed = kiln(run);
  ASSERT_EQ(guessed.rc, 0) << guessed.output;
  expect_contains(guessed, {kNoRecord, "normalizing as kiln train would this data (--normalize auto)",
                            "give --normalize imagenet for weights trained with ImageNet's"}, "eval --model bare.onnx");
  const Result told = kiln(run + " --normalize imagenet");
  ASSERT_EQ(told.rc, 0) << told.output;
  EXPECT_EQ(told.output.find(kNoRecord), std::string::npos) << told.output;
  const Result file_says = kiln("eval --device cpu --json --model " + file("png.onnx") + " --data " + kDigitsPng);
  ASSERT_EQ(file_says.rc, 0) << file_says.output;
  // The same normalization from the flag as from the metadata: the same evaluation to the last bit.
  EXPECT_EQ(json_of(told).at("loss"), json_of(file_says).at("loss"));
  // The data's statistics: 0.818-0.860 against 0.938-0.946 on two Xeons (ModelFileMetadataCli measured
  // the same model); a flag or a fallback ignored would give the same loss as `told`, exactly.
  EXPECT_LT(json_of(guessed).at("top1").get<double>(), json_of(told).at("top1").get<double>() - 0.03);
  // The flag overrides a file that records one, and says whose it set aside.
  const Result overridden =
      kiln("eval --device cpu --model " + file("png.onnx") + " --data " + kDigitsPng + " --normalize dataset");
  ASSERT_EQ(overridden.rc, 0) << overridden.output;
  expect_contains(overridden, {"--normalize dataset: normalizing as it says"}, "--normalize dataset");
  EXPECT_EQ(testing::test_accuracy(overridden), json_of(guessed).at("top1").get<double>());
}

// predict --model gives the checkpoint's probabilities; a 3-channel file that records no
// normalization takes ImageNet's (what torchvision's weights take), which is also what this one's
// metadata says: the same probabilities again.
TEST_F(ModelFileEvalCli, PredictOfTheFileIsPredictOfItsCheckpoint) {
  const std::string images = val_pngs(2);
  const Result want = kiln("predict --device cpu --json --top 10 --checkpoint " + file("png.safetensors") + images);
  ASSERT_EQ(want.rc, 0) << want.output;
  for (const std::string name : {"png.onnx", "bare.onnx"}) {
    const Result got = kiln("predict --device cpu --json --top 10 --model " + file(name) + images);
    ASSERT_EQ(got.rc, 0) << got.output;
    expect_contains(got, {name == "png.onnx" ? kFileNorm : kNoRecord}, name);
    const nlohmann::json w = json_of(want).at("predictions"), g = json_of(got).at("predictions");
    EXPECT_EQ(json_of(got).at("model_file"), file(name));
    ASSERT_EQ(g.size(), 20u);
    ASSERT_EQ(w.size(), g.size());
    int right = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(g[i].at("image"), w[i].at("image"));
      // Each class's probability (matched by index, so near-ties may rank either way).
      std::vector<double> pw(10), pg(10);
      for (const auto& t : w[i].at("top")) pw[t.at("index").get<size_t>()] = t.at("probability").get<double>();
      for (const auto& t : g[i].at("top")) pg[t.at("index").get<size_t>()] = t.at("probability").get<double>();
      for (size_t c = 0; c < 10; ++c) EXPECT_NEAR(pg[c], pw[c], 1e-5) << name << " " << g[i].at("image") << " " << c;
      // The bare file names no classes: its outputs are named by index, which here are the same.
      const std::string digit = fs::path(g[i].at("image").get<std::string>()).parent_path().filename().string();
      right += g[i].at("top")[0].at("class") == digit;
    }
    EXPECT_GE(right, 16) << got.output;  // a trained model
  }
}

// Images of another size than the file's input are resized and center-cropped as ImageNet's
// evaluation does: a digit drawn at twice the size is still read as that digit.
TEST_F(ModelFileEvalCli, PredictResizesImagesOfAnotherSize) {
  const std::string three = kDigitsPng + "/val/3/" + fs::directory_iterator(kDigitsPng + "/val/3")->path().filename().string();
  const std::vector<uint8_t> bytes = read_file_bytes(three, "");
  DecodeRequest rgb;
  rgb.channels = 3;
  const DecodedImage small = decode_image(bytes.data(), bytes.size(), three, rgb);
  // Twice the size, each pixel a 2x2 block, with a border of 2 pixels of the corner's value: the
  // resize to 23 and center crop to 20 bring back about the original framing.
  const int w = small.width * 2 + 4, h = small.height * 2 + 4;
  std::vector<uint8_t> big(size_t(w * h * 3));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        const int sy = std::clamp((y - 2) / 2, 0, small.height - 1), sx = std::clamp((x - 2) / 2, 0, small.width - 1);
        big[size_t((y * w + x) * 3 + c)] = small.pixels[size_t((sy * small.width + sx) * 3 + c)];
      }
  const std::vector<uint8_t> png = encode_png(big.data(), w, h, 3);
  const std::string big_file = file("big_three.png");
  std::ofstream(big_file, std::ios::binary).write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
  const Result r = kiln("predict --device cpu --json --top 1 --model " + file("png.onnx") + " " + big_file);
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_EQ(json_of(r).at("predictions")[0].at("top")[0].at("class"), "3") << r.output;
  // The checkpoint's recipe keeps its images at their own size: another size is refused there.
  const Result checkpoint = kiln("predict --device cpu --checkpoint " + file("png.safetensors") + " " + big_file);
  EXPECT_NE(checkpoint.rc, 0);
  expect_contains(checkpoint, {"records no resize"}, "predict --checkpoint on a larger image");
}

TEST_F(ModelFileEvalCli, RefusalsNameWhatToGive) {
  const std::string png = file("png.onnx"), ck = file("png.safetensors");
  const std::string image = val_pngs(1).substr(1, val_pngs(1).find(' ', 1) - 1);
  struct Case {
    std::string args;
    std::vector<std::string> says;
  };
  const fs::path two = *dir_ / "two_classes";
  for (const std::string split : {"train", "val"})
    for (const std::string d : {"0", "1"}) fs::create_directories(two / split / d);
  for (const std::string split : {"train", "val"})
    for (const std::string d : {"0", "1"})
      fs::copy_file(image, two / split / d / "a.png", fs::copy_options::overwrite_existing);
  const std::vector<Case> cases = {
      {"eval --model " + png + " --checkpoint " + ck + " --data " + kDigitsPng, {"give --checkpoint or --model, not both"}},
      {"predict " + image, {"give --checkpoint FILE (written by kiln train) or --model FILE.onnx"}},
      {"eval --model digits_cnn --data " + kDigitsPng, {"a zoo model has no trained weights to eval"}},
      {"eval --model " + png, {"give the data to evaluate on with --data (a model file records none)"}},
      {"eval --device cpu --model " + png + " --data " + kDigitsPng + " --channels 1",
       {"reads images of 3 channels; this data", "gives 1", "give --channels 3"}},
      {"eval --device cpu --model " + png + " --data " + two.string(),
       {"gives 10 classes; this data ('" + two.string() + "', val split) has 2: labels would not match outputs"}},
      {"predict --checkpoint " + ck + " --image-size 32 " + image, {"--image-size is for --model FILE.onnx"}},
  };
  for (const Case& c : cases) {
    const Result r = kiln(c.args);
    EXPECT_NE(r.rc, 0) << c.args;
    expect_contains(r, c.says, c.args);
  }
}

}  // namespace
}  // namespace kiln

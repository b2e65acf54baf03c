// `kiln eval` (loss, per-class accuracy, --json) and `kiln predict` through the built binary, checked
// against what the public C++ API computes from the same checkpoint: the loss by our own
// cross-entropy over logits the test runs itself, the predictions by raw logits and by the
// device's own hit counting.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/image/image_codec.h"
#include "kiln/checkpoint.h"
#include "kiln/image_folder.h"
#include "kiln/trainer.h"
#include "kiln/zoo.h"
#include "support/kiln_cli.h"
#include "support/program_fixture.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::kiln;
using testing::Result;
using testing::TempDir;

const std::string kDigitsPng = KILN_SOURCE_DIR "/data/digits_png";
const std::string kPhotos = KILN_SOURCE_DIR "/data/photos_tiny";

// The one JSON object a --json command prints: its whole output must be that line.
nlohmann::json only_json(const Result& r) {
  std::string text = r.output;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  EXPECT_EQ(text.find('\n'), std::string::npos) << "more than one line:\n" << r.output;
  return nlohmann::json::parse(text);
}

// -log softmax(z)[label] in double.
double cross_entropy(const std::vector<double>& z, int label) {
  const double top = *std::max_element(z.begin(), z.end());
  double sum = 0;
  for (double v : z) sum += std::exp(v - top);
  return std::log(sum) + top - z[size_t(label)];
}

// A checkpoint's model, compiled for `batch` digits on the CPU, with its weights.
std::unique_ptr<Trainer> digits_model(const std::string& ckpt, int batch) {
  CompileOptions c;
  c.batch = batch;
  c.input_hwc = {20, 20, 1};
  auto trainer = std::make_unique<Trainer>(zoo::digits_cnn(10), c, TrainOptions{});
  trainer->load_weights(ckpt);
  return trainer;
}

// Eval-mode logits of gray 20x20 images (uint8, HW each) through the executable itself: the
// checkpoint's normalization applied here, nothing of the data loader.
std::vector<std::vector<double>> logits_of(Trainer& trainer, const std::vector<const uint8_t*>& images) {
  Executable& exe = trainer.executable();
  const Program& p = exe.program();
  const int64_t batch = p.tensors[p.input].shape[0];
  const float mean = trainer.normalization().mean.at(0), std = trainer.normalization().std.at(0);
  std::vector<std::vector<double>> out;
  for (size_t first = 0; first < images.size(); first += size_t(batch)) {
    std::vector<float> x(size_t(batch) * 400, 0.f);
    for (size_t i = first; i < std::min(images.size(), first + size_t(batch)); ++i)
      for (int v = 0; v < 400; ++v) x[(i - first) * 400 + v] = (images[i][v] / 255.f - mean) / std;
    exe.write(p.input, x.data(), x.size() * sizeof(float));
    std::vector<int32_t> labels(size_t(batch), -1);
    exe.write(p.label, labels.data(), labels.size() * sizeof(int32_t));
    exe.run_inference({});
    const std::vector<float> z = exe.read<float>(p.inference_logits);
    for (size_t i = first; i < std::min(images.size(), first + size_t(batch)); ++i)
      out.emplace_back(z.begin() + std::ptrdiff_t((i - first) * 10), z.begin() + std::ptrdiff_t((i - first + 1) * 10));
  }
  return out;
}

// A digits_cnn trained one epoch on the digits: `kiln eval --json` adds up (counts, per-class
// accuracies to top-1), agrees with the training run's own test accuracy (counted on the device),
// and its loss is the mean cross-entropy of logits this test computes through the executable. The
// text report says the same. Then `kiln predict` on PNG files of the digits gives the classes and
// probabilities of the executable's logits for the same pixels, and refuses bad files by name.
TEST(EvalPredictCli, DigitsEvalReportAndPredictionsMatchTheLibrary) {
  const std::string digits = testing::shared_digits_dir();
  ASSERT_TRUE(fs::exists(digits + "/t10k-images-idx3-ubyte")) << "no digits at " << digits << ": run scripts/setup.sh";
  TempDir dir;
  const std::string ckpt = dir.file("digits.safetensors");
  const Result train = kiln("train --device cpu --model digits_cnn --data " + digits +
                            " --epochs 1 --batch 64 --workers 1 --checkpoint " + ckpt);
  ASSERT_EQ(train.rc, 0) << train.output;

  const Result eval = kiln("eval --device cpu --checkpoint " + ckpt + " --data " + digits + " --json");
  ASSERT_EQ(eval.rc, 0) << eval.output;
  const nlohmann::json j = only_json(eval);
  EXPECT_EQ(j["checkpoint"], ckpt);
  EXPECT_EQ(j["data"], digits);
  EXPECT_EQ(j["split"], "val");
  const Dataset test = load_dataset(digits, "idx", false);
  ASSERT_EQ(j["images"].get<int64_t>(), test.count);
  ASSERT_EQ(j["per_class"].size(), 10u);
  int64_t counted = 0;
  double weighted = 0;
  for (int c = 0; c < 10; ++c) {
    const nlohmann::json& k = j["per_class"][std::to_string(c)];  // no names in IDX data: the indices
    const int64_t count = k["count"].get<int64_t>(), correct = k["correct"].get<int64_t>();
    EXPECT_EQ(count, std::count(test.labels.begin(), test.labels.end(), c)) << "class " << c;
    EXPECT_DOUBLE_EQ(k["accuracy"].get<double>(), double(correct) / double(count));
    counted += count;
    weighted += k["accuracy"].get<double>() * double(count);
  }
  EXPECT_EQ(counted, j["images"].get<int64_t>());
  const double top1 = j["top1"].get<double>();
  EXPECT_NEAR(weighted / double(counted), top1, 1e-12);
  EXPECT_GE(j["top5"].get<double>(), top1);
  // The device's hit count of the training run's last evaluation: the same model, the same images.
  EXPECT_EQ(fmt::format("{:.4f}", top1), fmt::format("{:.4f}", testing::test_accuracy(train))) << train.output;
  EXPECT_GT(top1, 0.5);  // one epoch learns the digits far beyond chance

  // The loss from logits the test makes itself (its own normalization and batches of 100).
  const double loss = j["loss"].get<double>();
  ASSERT_TRUE(std::isfinite(loss));
  std::unique_ptr<Trainer> model = digits_model(ckpt, 100);
  std::vector<const uint8_t*> pixels;
  for (int64_t i = 0; i < test.count; ++i) pixels.push_back(test.images.data() + i * 400);
  const std::vector<std::vector<double>> logits = logits_of(*model, pixels);
  double sum = 0;
  int64_t hits = 0;
  for (int64_t i = 0; i < test.count; ++i) {
    sum += cross_entropy(logits[size_t(i)], test.labels[size_t(i)]);
    hits += std::max_element(logits[size_t(i)].begin(), logits[size_t(i)].end()) - logits[size_t(i)].begin() ==
            test.labels[size_t(i)];
  }
  EXPECT_NEAR(loss, sum / double(test.count), 1e-5 * (sum / double(test.count)));
  EXPECT_NEAR(top1, double(hits) / double(test.count), 1.5 / double(test.count));  // a near tie may flip

  const Result text = kiln("eval --device cpu --checkpoint " + ckpt + " --data " + digits);
  ASSERT_EQ(text.rc, 0) << text.output;
  const nlohmann::json& seven = j["per_class"]["7"];
  testing::expect_contains(text, {fmt::format("test loss: {:.6f}", loss), fmt::format("test accuracy: {:.4f}", top1),
                                  fmt::format("{}/{}", seven["correct"].get<int>(), seven["count"].get<int>())},
                           "eval");

  // Predictions for PNG files of the digits (the IDX test set's images), compared with the
  // executable's logits for the decoded pixels.
  ASSERT_TRUE(fs::exists(kDigitsPng + "/val")) << kDigitsPng << " is missing: run scripts/setup.sh";
  std::vector<std::string> files;
  for (int c : {0, 3, 7, 9})
    for (const auto& e : fs::directory_iterator(kDigitsPng + "/val/" + std::to_string(c))) {
      files.push_back(e.path().string());
      break;
    }
  std::vector<DecodedImage> decoded;
  for (const std::string& f : files) {
    const std::vector<uint8_t> bytes = testing::read_bytes(f);
    DecodeRequest gray;
    gray.channels = 1;
    decoded.push_back(decode_image(bytes.data(), bytes.size(), f, gray));
    ASSERT_EQ(decoded.back().width * decoded.back().height, 400) << f;
  }
  std::vector<const uint8_t*> png_pixels;
  for (const DecodedImage& d : decoded) png_pixels.push_back(d.pixels.data());
  const std::vector<std::vector<double>> png_logits = logits_of(*model, png_pixels);
  std::string args = "predict --device cpu --json --top 10 --checkpoint " + ckpt;
  for (const std::string& f : files) args += " " + f;
  const Result predicted = kiln(args);
  ASSERT_EQ(predicted.rc, 0) << predicted.output;
  const nlohmann::json p = only_json(predicted);
  ASSERT_EQ(p["predictions"].size(), files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    const nlohmann::json& one = p["predictions"][i];
    EXPECT_EQ(one["image"], files[i]);
    ASSERT_EQ(one["top"].size(), 10u);
    const std::vector<double>& z = png_logits[i];
    double total = 0;
    for (size_t r = 0; r < 10; ++r) {
      const nlohmann::json& t = one["top"][r];
      const int index = t["index"].get<int>();
      EXPECT_EQ(t["class"], std::to_string(index));
      const double probability = t["probability"].get<double>();
      EXPECT_NEAR(probability, std::exp(-cross_entropy(z, index)), 1e-5) << files[i] << " class " << index;
      if (r > 0) {
        EXPECT_LE(probability, one["top"][r - 1]["probability"].get<double>()) << files[i];
      }
      total += probability;
    }
    EXPECT_NEAR(total, 1.0, 1e-9) << files[i];
    EXPECT_EQ(one["top"][0]["index"].get<int64_t>(), std::max_element(z.begin(), z.end()) - z.begin()) << files[i];
  }
  const Result top3 = kiln("predict --device cpu --top 3 --checkpoint " + ckpt + " " + files[2]);
  ASSERT_EQ(top3.rc, 0) << top3.output;
  testing::expect_contains(top3, {files[2], fmt::format("1. {}", p["predictions"][2]["top"][0]["class"].get<std::string>()),
                                  "3. "}, "predict --top 3");
  EXPECT_EQ(top3.output.find("4. "), std::string::npos) << top3.output;

  // Bad files: each refused by name, nothing crashes.
  const std::string missing = dir.file("missing.png"), text_file = dir.file("notes.png"), large = dir.file("big.png");
  testing::write_bytes(text_file, {'h', 'e', 'l', 'l', 'o', '\n'});
  const std::vector<uint8_t> gray24(24 * 24, 128);
  testing::write_bytes(large, encode_png(gray24.data(), 24, 24, 1));
  const Result r_missing = kiln("predict --device cpu --checkpoint " + ckpt + " " + files[0] + " " + missing);
  EXPECT_EQ(r_missing.rc, 2) << r_missing.output;
  testing::expect_contains(r_missing, {missing, "does not exist"}, "predict a missing file");
  const Result r_text = kiln("predict --device cpu --checkpoint " + ckpt + " " + text_file);
  EXPECT_EQ(r_text.rc, 2) << r_text.output;
  testing::expect_contains(r_text, {text_file, "not a JPEG or PNG"}, "predict a text file");
  const Result r_large = kiln("predict --device cpu --checkpoint " + ckpt + " " + large);
  EXPECT_EQ(r_large.rc, 2) << r_large.output;
  testing::expect_contains(r_large, {large, "24x24", "takes 20x20 images"}, "predict an image of another size");
}

// A model trained on an image folder (ImageNet's evaluation transform: resize, center crop):
// `kiln predict` names the folder's classes, and the device's own hit counting (the path of `kiln
// eval` and of the training run's evaluation) agrees with each top-1 prediction: an image labelled
// with its predicted class is a hit, labelled with the runner-up it is not.
TEST(EvalPredictCli, ImageFolderPredictionsAgreeWithTheDevicesHitCount) {
  ASSERT_TRUE(fs::exists(kPhotos + "/val")) << kPhotos << " is missing: run scripts/setup.sh";
  TempDir dir;
  const std::string ckpt = dir.file("photos.safetensors");
  const Result train = kiln("train --device cpu --model digits_cnn --data " + kPhotos +
                            " --image-size 24 --eval-resize 28 --epochs 2 --batch 16 --workers 1 --checkpoint " + ckpt);
  ASSERT_EQ(train.rc, 0) << train.output;
  const ImageFolderIndex val = scan_image_folder(kPhotos + "/val");
  std::vector<std::string> files;
  for (size_t i = 0; i < val.files.size(); i += val.files.size() / 5) files.push_back(val.files[i]);
  std::string args = "predict --device cpu --json --checkpoint " + ckpt;
  for (const std::string& f : files) args += " " + f;
  const Result predicted = kiln(args);
  ASSERT_EQ(predicted.rc, 0) << predicted.output;
  const nlohmann::json p = only_json(predicted);
  ASSERT_EQ(p["predictions"].size(), files.size());

  CompileOptions c;
  c.batch = 1;
  c.input_hwc = {24, 24, 3};
  Trainer model(zoo::digits_cnn(int(val.classes.size())), c, TrainOptions{});
  model.load_weights(ckpt);
  ASSERT_EQ(model.class_names(), val.classes);
  ImageTransform eval;
  eval.size = 24, eval.eval_resize = 28;
  auto hit = [&](const std::string& file, int label) {
    ImageFolderIndex one;
    one.classes = val.classes, one.files = {file}, one.labels = {label};
    return model.evaluate_accuracy(*open_image_folder(one, eval, false)).top1;
  };
  for (size_t i = 0; i < files.size(); ++i) {
    const nlohmann::json& top = p["predictions"][i]["top"];
    ASSERT_EQ(top.size(), 5u);  // the default --top
    for (size_t r = 1; r < top.size(); ++r)
      EXPECT_LE(top[r]["probability"].get<double>(), top[r - 1]["probability"].get<double>());
    const int first = top[0]["index"].get<int>(), second = top[1]["index"].get<int>();
    EXPECT_EQ(top[0]["class"], val.classes[size_t(first)]);
    EXPECT_GT(top[0]["probability"].get<double>(), top[1]["probability"].get<double>()) << "a tie: " << files[i];
    EXPECT_EQ(hit(files[i], first), 1.0) << files[i];
    EXPECT_EQ(hit(files[i], second), 0.0) << files[i];
  }
  // Photos of any size go through the checkpoint's resize and crop: the folder's JPEGs are larger.
  const std::vector<uint8_t> jpeg = testing::read_bytes(files[0]);
  EXPECT_GT(read_image_info(jpeg.data(), jpeg.size(), files[0]).width, 24);
}

// Issue 47, item 6: `kiln eval` without --data evaluated on data/digits whatever the checkpoint was
// trained on. It now takes the data recorded in the checkpoint (an absolute path), says so, and
// counts that data's test images; a checkpoint written before the data was recorded asks for
// --data, and still evaluates with it.
TEST(EvalPredictCli, EvalWithoutDataTakesTheDataTheCheckpointWasTrainedOn) {
  const std::string digits = testing::shared_digits_dir();
  ASSERT_TRUE(fs::exists(digits + "/t10k-images-idx3-ubyte")) << "no digits at " << digits << ": run scripts/setup.sh";
  TempDir dir;
  const std::string data = dir.file("few_digits"), ckpt = dir.file("few.safetensors");
  testing::write_first_digits(digits, data, 512, 96);
  const Result train = kiln("train --device cpu --model digits_cnn --data " + data +
                            " --epochs 1 --batch 32 --workers 1 --checkpoint " + ckpt);
  ASSERT_EQ(train.rc, 0) << train.output;
  const Result eval = kiln("eval --device cpu --checkpoint " + ckpt + " --json");
  ASSERT_EQ(eval.rc, 0) << eval.output;
  testing::expect_contains(eval, {"kiln: no --data given: evaluating on " + data + ", the data " + ckpt +
                                  " was trained on"}, "eval without --data");
  const std::string json = eval.output.substr(eval.output.find('{'));
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j["data"], data);
  EXPECT_EQ(j["images"].get<int64_t>(), 96) << "the checkpoint's 96 test digits, not data/digits' 1000";
  EXPECT_NEAR(j["top1"].get<double>(), testing::test_accuracy(train), 5e-5) << eval.output;  // printed to 4 places

  // The same checkpoint as one written before the data was recorded.
  SafetensorsFile old = load_safetensors(ckpt);
  ASSERT_EQ(old.metadata.erase("recipe.data_source"), 1u);
  const std::string old_ckpt = dir.file("old.safetensors");
  save_safetensors(old_ckpt, old.tensors, old.metadata);
  const Result asks = kiln("eval --device cpu --checkpoint " + old_ckpt);
  EXPECT_EQ(asks.rc, 2) << asks.output;
  testing::expect_contains(asks, {"no --data given", old_ckpt, "does not record the data it was trained on", "--data"},
                           "eval of an older checkpoint without --data");
  const Result given = kiln("eval --device cpu --checkpoint " + old_ckpt + " --data " + data);
  ASSERT_EQ(given.rc, 0) << given.output;
  EXPECT_DOUBLE_EQ(testing::test_accuracy(given), testing::test_accuracy(train)) << given.output;
}

// Issue 47, item 6: data of another image size, channel count or class count failed on a tensor's
// shape ("conv1.conv.weight [32,3,3,3]"); it is refused in the data's terms before any tensor is
// loaded, naming both and the data the checkpoint was trained on.
TEST(EvalPredictCli, EvalRefusesDataOfAnotherGeometryOrClassCountInItsTerms) {
  const std::string digits = testing::shared_digits_dir();
  ASSERT_TRUE(fs::exists(digits + "/t10k-images-idx3-ubyte")) << "no digits at " << digits << ": run scripts/setup.sh";
  TempDir dir;
  const std::string data = dir.file("few_digits"), ckpt = dir.file("few.safetensors");
  testing::write_first_digits(digits, data, 256, 64);
  const Result train = kiln("train --device cpu --model digits_cnn --data " + data +
                            " --epochs 1 --batch 32 --workers 1 --checkpoint " + ckpt);
  ASSERT_EQ(train.rc, 0) << train.output;
  // Three classes of RGB PNGs, 24x24 (the plain transform keeps them so).
  const fs::path photos = dir.file("rgb");
  for (const char* cls : {"a", "b", "c"})
    for (const char* split : {"train", "val"}) {
      fs::create_directories(photos / split / cls);
      for (int i = 0; i < 2; ++i) {
        std::vector<uint8_t> p(24 * 24 * 3, uint8_t(40 * i + cls[0]));
        testing::write_bytes((photos / split / cls / fmt::format("{}.png", i)).string(), encode_png(p.data(), 24, 24, 3));
      }
    }
  const Result wrong = kiln("eval --device cpu --checkpoint " + ckpt + " --data " + photos.string() +
                            " --transform plain");
  EXPECT_EQ(wrong.rc, 2) << wrong.output;
  testing::expect_contains(wrong, {"checkpoint '" + ckpt + "' was trained on 20x20x1 images of 10 classes",
                                   "this data ('" + photos.string() + "', val split) is 24x24x3 with 3",
                                   "image size 24x24 against 20x20", "3 channels against 1",
                                   "other classes, 3 against 10", "Nothing was loaded", "--data " + data},
                           "eval on data of another kind");
  EXPECT_EQ(wrong.output.find("conv1.conv.weight"), std::string::npos) << wrong.output;
  EXPECT_EQ(wrong.output.find("test accuracy"), std::string::npos) << wrong.output;
}

// The data's folder is recorded for `kiln eval` (recipe.data_source), but a resume does not compare
// it: a checkpoint written before it was recorded resumes, and so does a run whose data moved.
TEST(EvalPredictCli, TheRecordedDataFolderDoesNotStopAResume) {
  const std::string digits = testing::shared_digits_dir();
  ASSERT_TRUE(fs::exists(digits + "/t10k-images-idx3-ubyte")) << "no digits at " << digits << ": run scripts/setup.sh";
  TempDir dir;
  const std::string data = dir.file("few_digits"), ckpt = dir.file("few.safetensors");
  testing::write_first_digits(digits, data, 256, 64);
  const std::string run = "train --device cpu --model digits_cnn --batch 32 --workers 1 --checkpoint " + ckpt;
  const Result first = kiln(run + " --data " + data + " --epochs 1");
  ASSERT_EQ(first.rc, 0) << first.output;
  SafetensorsFile old = load_safetensors(ckpt);
  ASSERT_EQ(old.metadata.erase("recipe.data_source"), 1u);
  save_safetensors(ckpt, old.tensors, old.metadata);
  const std::string moved = dir.file("moved_digits");
  fs::rename(data, moved);
  const Result resumed = kiln(run + " --data " + moved + " --epochs 2 --resume");
  ASSERT_EQ(resumed.rc, 0) << resumed.output;
  testing::expect_contains(resumed, {"resumed from " + ckpt + ": epoch 1 of 2 done", "epoch 2/2"}, "resume");
  const nlohmann::json source = nlohmann::json::parse(load_safetensors(ckpt).metadata.at("recipe.data_source"));
  EXPECT_EQ(source, nlohmann::json({{"path", moved}, {"format", "idx"}})) << "the run's own folder, recorded again";
}

}  // namespace
}  // namespace kiln

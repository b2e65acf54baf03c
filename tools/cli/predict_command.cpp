#include "cli/predict_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/checkpoint_model.h"
#include "cli/model_file_eval.h"
#include "cli/named_setting_options.h"
#include "cli/predict_settings.h"
#include "core/file_io.h"
#include "data/image/image_codec.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"
#include "kiln/trainer.h"

namespace kiln::cli {
namespace {

// How the checkpoint's evaluation images were made: its recorded image transform (image folders,
// packed files), else, for in-memory data (IDX, CIFAR-10), images used as they are at the model's size.
ImageTransform eval_transform(const CheckpointModel& m) {
  DataArgs d;
  if (m.recipe("transform").empty()) {
    d.transform = "plain";
    d.channels = int(m.input.channels);
  }
  adopt_data_recipe(m, nullptr, d);
  return data_options(d).transform;
}

// Each file decoded as the transform will decode it, so a file that cannot be read stops here
// with its name (and no batch is run), and an image the transform cannot bring to the model's size
// is refused naming the size it needs.
void check_images(const std::vector<std::string>& images, const ImageTransform& t, const SampleShape& input,
                  const std::string& checkpoint) {
  for (const std::string& path : images) {
    const std::vector<uint8_t> bytes = read_file_bytes(path, "");
    DecodeRequest request;
    request.channels = t.channels;
    DecodedImage image = decode_image(bytes.data(), bytes.size(), path, request);
    if (t.exif_orientation)
      image = apply_orientation(image, read_image_info(bytes.data(), bytes.size(), path).orientation);
    if (t.kind != ImageTransform::Kind::Plain) continue;  // resized and cropped to the model's size
    if (image.width != input.width || image.height != input.height)
      fail("image '{}' is {}x{} (width x height) but the model of '{}' takes {}x{} images, and its checkpoint "
           "records no resize (it was trained on images used at their own size); give a {}x{} image", path,
           image.width, image.height, checkpoint, input.width, input.height, input.width, input.height);
  }
}

// What runs the images: the trained model, how images become its inputs, and what to call it.
struct Predictor {
  std::unique_ptr<Trainer> trainer;
  ImageTransform transform;
  std::string what, model;  // the checkpoint or model file; its model's name
  int classes = 0;
};

Predictor checkpoint_predictor(const PredictArgs& a) {
  const CheckpointModel model = read_checkpoint_model(a.checkpoint);
  Predictor p{nullptr, eval_transform(model), a.checkpoint, model.model, model.classes};
  check_images(a.images, p.transform, model.input, a.checkpoint);
  EvalRun run;
  run.device = a.device, run.precision = a.precision;
  run.batch = a.batch > 0 ? a.batch : std::min(model.batch, int(a.images.size()));
  run.workers = 1;
  p.trainer = evaluation_trainer(model, model.input, run);
  return p;
}

// A model file's images: used as they are when every one is of the model's size (as kiln's exports
// of models trained on such images take them); otherwise each resized (its short side to 256/224 of
// the model's side) and center-cropped, ImageNet's evaluation, as torchvision's weights are evaluated.
ImageTransform file_transform(const std::vector<std::string>& images, const Shape& hwc, const std::string& file) {
  DataArgs d;
  d.channels = int(hwc[2]);
  d.transform = "plain";
  for (const std::string& path : images) {  // headers only; check_images decodes each file once
    const std::vector<uint8_t> bytes = read_file_bytes(path, "");
    const ImageInfo info = read_image_info(bytes.data(), bytes.size(), path);
    if (info.height != hwc[0] || info.width != hwc[1]) {
      d.transform = "imagenet";  // one image of another size decides it
      break;
    }
  }
  if (d.transform == "imagenet") {
    if (hwc[0] != hwc[1])
      fail("--model '{}' takes {}x{} images (width x height), not square, and the images are of other sizes: kiln "
           "predict resizes and center-crops to square sides only; give images of {}x{}", file, hwc[1], hwc[0],
           hwc[1], hwc[0]);
    d.image_size = int(hwc[0]);
    d.eval_resize = int((hwc[0] * 256 + 112) / 224);
  }
  return data_options(d).transform;
}

Predictor file_predictor(const PredictArgs& a) {
  EvalRun run;
  run.device = a.device, run.precision = a.precision;
  run.batch = a.batch > 0 ? a.batch : std::min(kModelFileEvalBatch, int(a.images.size()));
  run.workers = 1;
  FileEvaluation f = file_prediction(a.model, a.image_size, a.image_size, run);
  const Shape hwc = *f.source.blueprint.input_hwc();
  Predictor p{std::move(f.trainer), file_transform(a.images, hwc, a.model), a.model, f.source.blueprint.name(),
              f.classes};
  check_images(a.images, p.transform, {hwc[0], hwc[1], hwc[2]}, a.model);
  return p;
}

struct Ranked {
  int label = 0;
  double probability = 0;
};

// The softmax of a row of logits (computed in double from the largest logit down, so exp cannot
// overflow), most probable first; ties keep the class order.
std::vector<Ranked> rank_classes(const double* z, int classes) {
  const double top = *std::max_element(z, z + classes);
  std::vector<Ranked> out(static_cast<size_t>(classes));
  double sum = 0;
  for (int c = 0; c < classes; ++c) sum += out[size_t(c)].probability = std::exp(z[c] - top);
  for (int c = 0; c < classes; ++c) out[size_t(c)].label = c, out[size_t(c)].probability /= sum;
  std::stable_sort(out.begin(), out.end(), [](const Ranked& a, const Ranked& b) { return a.probability > b.probability; });
  return out;
}

}  // namespace

CLI::App* add_predict_command(CLI::App& app, PredictArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "predict", "classify image files (JPEG/PNG) with a checkpoint (or a model file's weights, --model): the top "
                 "classes and their probabilities");
  // Its flags (cli/predict_settings.h): --checkpoint or --model (and its --image-size), --top, --batch, --device,
  // --precision, --json.
  add_named_setting_options(cmd, predict_settings(), a, {{"checkpoint", "FILE"}, {"model", "FILE.onnx"}});
  cmd->add_option("images", a.images, "JPEG or PNG files to classify")
      ->required()
      ->type_name("IMAGE...")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return cmd;
}

int run_predict(const PredictArgs& a) {
  check_checkpoint_or_model_file("predict", a.checkpoint, a.model);
  if (a.image_size > 0 && a.model.empty())
    fail("kiln predict: --image-size is for --model FILE.onnx; a checkpoint's model takes the images it was trained "
         "on (drop --image-size)");
  const Predictor predictor = a.model.empty() ? checkpoint_predictor(a) : file_predictor(a);
  const Trainer* trainer = predictor.trainer.get();
  const int classes = predictor.classes;

  // The files as an evaluation split of their own: the loader and the transform of `kiln eval`.
  ImageFolderIndex files;
  files.files = a.images;
  files.labels.assign(a.images.size(), 0);  // unused: only the logits are looked at
  for (int c = 0; c < classes; ++c) files.classes.push_back(class_name(*trainer, c));
  const std::unique_ptr<SampleSource> source = open_image_folder(std::move(files), predictor.transform, false);
  std::vector<std::vector<Ranked>> ranked(a.images.size());
  predictor.trainer->infer(*source, [&](int64_t first, int64_t rows, const double* logits, const int32_t*) {
    for (int64_t r = 0; r < rows; ++r) ranked[size_t(first + r)] = rank_classes(logits + r * classes, classes);
  });

  const size_t k = size_t(std::min(a.top, classes));
  if (a.json) {
    nlohmann::ordered_json predictions = nlohmann::ordered_json::array();
    for (size_t i = 0; i < a.images.size(); ++i) {
      nlohmann::ordered_json top = nlohmann::ordered_json::array();
      for (size_t j = 0; j < k; ++j)
        top.push_back({{"class", class_name(*trainer, ranked[i][j].label)},
                       {"index", ranked[i][j].label},
                       {"probability", ranked[i][j].probability}});
      predictions.push_back({{"image", a.images[i]}, {"top", top}});
    }
    const nlohmann::ordered_json out = {{a.model.empty() ? "checkpoint" : "model_file", predictor.what},
                                        {"model", predictor.model},
                                        {"classes", classes},
                                        {"predictions", predictions}};
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("kiln predict: {} ({}, {} classes), {} image{}\n", predictor.what, predictor.model, classes,
             a.images.size(), a.images.size() == 1 ? "" : "s");
  size_t width = 1;
  for (int c = 0; c < classes; ++c) width = std::max(width, class_name(*trainer, c).size());
  for (size_t i = 0; i < a.images.size(); ++i) {
    fmt::print("{}\n", a.images[i]);
    for (size_t j = 0; j < k; ++j)
      fmt::print("  {}. {:<{}}  {:.4f}\n", j + 1, class_name(*trainer, ranked[i][j].label), width,
                 ranked[i][j].probability);
  }
  return 0;
}

}  // namespace kiln::cli

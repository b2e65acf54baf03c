#include "cli/predict_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/checkpoint_model.h"
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
void check_images(const std::vector<std::string>& images, const ImageTransform& t, const CheckpointModel& m) {
  for (const std::string& path : images) {
    const std::vector<uint8_t> bytes = read_file_bytes(path, "");
    DecodeRequest request;
    request.channels = t.channels;
    DecodedImage image = decode_image(bytes.data(), bytes.size(), path, request);
    if (t.exif_orientation)
      image = apply_orientation(image, read_image_info(bytes.data(), bytes.size(), path).orientation);
    if (t.kind != ImageTransform::Kind::Plain) continue;  // resized and cropped to the model's size
    if (image.width != m.input.width || image.height != m.input.height)
      fail("image '{}' is {}x{} (width x height) but the model of '{}' takes {}x{} images, and its checkpoint "
           "records no resize (it was trained on images used at their own size); give a {}x{} image", path,
           image.width, image.height, m.path, m.input.width, m.input.height, m.input.width, m.input.height);
  }
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
      "predict", "classify image files (JPEG/PNG) with a checkpoint: the top classes and their probabilities");
  // Its flags (cli/predict_settings.h): --checkpoint (required), --top, --batch, --device,
  // --precision, --json.
  add_named_setting_options(cmd, predict_settings(), a, {{"checkpoint", "FILE"}});
  cmd->get_option("--checkpoint")->required();
  cmd->add_option("images", a.images, "JPEG or PNG files to classify")
      ->required()
      ->type_name("IMAGE...")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  return cmd;
}

int run_predict(const PredictArgs& a) {
  const CheckpointModel model = read_checkpoint_model(a.checkpoint);
  const ImageTransform transform = eval_transform(model);
  check_images(a.images, transform, model);
  EvalRun run;
  run.device = a.device, run.precision = a.precision;
  run.batch = a.batch > 0 ? a.batch : std::min(model.batch, int(a.images.size()));
  run.workers = 1;
  const std::unique_ptr<Trainer> trainer = evaluation_trainer(model, model.input, run);

  // The files as an evaluation split of their own: the loader and the transform of `kiln eval`.
  ImageFolderIndex files;
  files.files = a.images;
  files.labels.assign(a.images.size(), 0);  // unused: only the logits are looked at
  for (int c = 0; c < model.classes; ++c) files.classes.push_back(class_name(*trainer, c));
  const std::unique_ptr<SampleSource> source = open_image_folder(std::move(files), transform, false);
  std::vector<std::vector<Ranked>> ranked(a.images.size());
  trainer->infer(*source, [&](int64_t first, int64_t rows, const double* logits, const int32_t*) {
    for (int64_t r = 0; r < rows; ++r) ranked[size_t(first + r)] = rank_classes(logits + r * model.classes, model.classes);
  });

  const size_t k = size_t(std::min(a.top, model.classes));
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
    const nlohmann::ordered_json out = {
        {"checkpoint", a.checkpoint}, {"model", model.model}, {"classes", model.classes}, {"predictions", predictions}};
    fmt::print("{}\n", out.dump());
    return 0;
  }
  fmt::print("kiln predict: {} ({}, {} classes), {} image{}\n", a.checkpoint, model.model, model.classes,
             a.images.size(), a.images.size() == 1 ? "" : "s");
  size_t width = 1;
  for (int c = 0; c < model.classes; ++c) width = std::max(width, class_name(*trainer, c).size());
  for (size_t i = 0; i < a.images.size(); ++i) {
    fmt::print("{}\n", a.images[i]);
    for (size_t j = 0; j < k; ++j)
      fmt::print("  {}. {:<{}}  {:.4f}\n", j + 1, class_name(*trainer, ranked[i][j].label), width,
                 ranked[i][j].probability);
  }
  return 0;
}

}  // namespace kiln::cli

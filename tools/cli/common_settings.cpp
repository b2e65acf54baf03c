#include "cli/common_settings.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "cli/model_source.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/zoo.h"

namespace kiln::cli {
namespace {

// --device: auto, or what parse_device_spec reads (cpu, cuda, cuda:N). Which GPUs exist is
// resolve_device's to say, when the run starts.
std::string device_refusal(const std::string& text) {
  if (text == "auto") return "";
  try {
    parse_device_spec(text);
  } catch (const Error&) {
    return fmt::format("'{}' is not a device: it takes auto, cpu, cuda or cuda:N (N the GPU's number)", text);
  }
  return "";
}

// --classes: its range [-1, ...) less 0, which counts no class. Text that is not a whole number is
// the type's to refuse.
std::string classes_refusal(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || v != 0) return "";
  return fmt::format("{} is out of range: it must be -1 or >= 1", text);
}

// --model: a zoo name, or an ONNX file (any path ending in .onnx: whether it is there and what it
// holds is cli/model_source.h's to say, when the command reads it).
std::string model_refusal(const std::string& text) {
  if (names_onnx_file(text)) return "";
  const std::vector<std::string> names = zoo::names();
  if (std::find(names.begin(), names.end(), text) != names.end()) return "";
  return fmt::format("'{}' is not one of {}, nor an ONNX file (a path ending in .onnx)", text, fmt::join(names, ", "));
}

// What --model takes, in `kiln settings`' words.
const std::string& model_takes() {
  static const std::string text = fmt::format("{}, or FILE.onnx", fmt::join(zoo::names(), ", "));
  return text;
}

}  // namespace

const std::vector<Setting>& common_settings() {
  using O = CommonOptions;
  static const std::vector<Setting> rows = [] {
    Setting model = text_setting<O>({.key = "model",
                                     .flag = "--model",
                                     .alias = "-m",
                                     .help = "a model of the zoo, under torchvision's name where it has one (resnet50, "
                                             "resnext50_32x4d, vgg16_bn, mobilenet_v2, ...; `kiln settings` lists them "
                                             "all), or an ONNX file (FILE.onnx, as torch.onnx.export writes it) whose "
                                             "architecture and weights kiln imports",
                                     .member = "CommonOptions::model",
                                     .fix = "use e.g. --model resnet50, or digits_cnn (the default), or net.onnx",
                                     .takes = model_takes().c_str()},
                                    &O::model);
    model.check = model_refusal;
    Setting device = text_setting<O>({.key = "device",
                                      .flag = "--device",
                                      .help = "auto (the first GPU when there is one, else the CPU), cpu, cuda or "
                                              "cuda:N",
                                      .member = "CommonOptions::device",
                                      .fix = "use e.g. --device cpu, or auto (the default)",
                                      .takes = "auto, cpu, cuda, cuda:N"},
                                     &O::device);
    device.check = device_refusal;
    // -1 leaves the count to the model (plan, bench) or the dataset (train).
    Setting classes = count_setting<O>({.key = "classes",
                                        .flag = "--classes",
                                        .help = "number of classes, >= 1; -1: the model's, or the dataset's",
                                        .member = "CommonOptions::classes",
                                        .fix = "use e.g. --classes 10, or -1 for the model's (plan) or the dataset's "
                                               "(train) count",
                                        .takes = "-1 or >= 1"},
                                       &O::classes, {-1, kUnbounded});
    classes.check = classes_refusal;
    return std::vector<Setting>{model, device, classes};
  }();
  return rows;
}

const Setting& common_setting(const char* key) {
  const Setting* row = find_setting(common_settings(), key);
  if (!row) fail("internal: no common setting '{}'", key);
  return *row;
}

}  // namespace kiln::cli

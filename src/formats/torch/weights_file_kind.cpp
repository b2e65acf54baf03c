#include "formats/torch/weights_file_kind.h"

#include <fmt/format.h>

namespace kiln {
namespace {

std::string meta(const SafetensorsFile& file, const std::string& key) {
  auto it = file.metadata.find(key);
  return it == file.metadata.end() ? std::string() : it->second;
}

bool holds(const SafetensorsFile& file, const std::string& name) {
  return file.find(name) != nullptr || file.find_skipped(name) != nullptr;
}

// " (fc.weight: 1000 classes)": the rows of the classifier's weight, when the file has it.
std::string classes_of(const SafetensorsFile& file, const std::string& weight) {
  const NamedTensor* w = file.find(weight);
  if (!w || w->shape.size() != 2) return "";
  return fmt::format(" ({}: {} classes)", weight, w->shape[0]);
}

}  // namespace

bool is_kiln_checkpoint(const SafetensorsFile& file) { return meta(file, "format").rfind("kiln-checkpoint-", 0) == 0; }

std::string kiln_checkpoint_model(const SafetensorsFile& file) { return meta(file, "recipe.model"); }

std::string kiln_checkpoint_text(const SafetensorsFile& file) {
  const std::string model = kiln_checkpoint_model(file), epochs = meta(file, "epochs_done");
  const std::string input = meta(file, "recipe.input"), classes = meta(file, "recipe.classes");
  std::string text = "a kiln checkpoint";
  if (!model.empty()) text += " of " + model;
  if (!epochs.empty()) text += fmt::format(" after {} epoch{}", epochs, epochs == "1" ? "" : "s");
  if (!input.empty() && !classes.empty()) text += fmt::format(", trained on {} images of {} classes", input, classes);
  return text;
}

std::string state_dict_text(const SafetensorsFile& file) {
  if (const std::string source = meta(file, "source"); !source.empty()) return "a state_dict of " + source;
  // torchvision's ResNets name their stages layer1..layer4 and their head fc; its VGGs number the
  // layers of `features` and `classifier` (the head is classifier.6).
  if (holds(file, "layer1.0.conv1.weight") && holds(file, "fc.weight"))
    return "a ResNet state_dict as torchvision names it" + classes_of(file, "fc.weight");
  if (holds(file, "features.0.weight") && holds(file, "classifier.6.weight"))
    return "a VGG state_dict as torchvision names it" + classes_of(file, "classifier.6.weight");
  const size_t count = file.tensors.size() + file.skipped.size();
  const std::string first = !file.tensors.empty() ? file.tensors.front().name
                            : !file.skipped.empty() ? file.skipped.front().name
                                                    : std::string();
  return fmt::format("a safetensors file of {} tensor{}{}", count, count == 1 ? "" : "s",
                     first.empty() ? "" : fmt::format(" (the first: '{}')", first));
}

}  // namespace kiln

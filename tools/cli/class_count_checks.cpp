#include "cli/class_count_checks.h"

#include <fmt/format.h>

#include <filesystem>

#include "data/dataset_formats.h"
#include "data/labels/class_coverage.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// The folder whose subfolders are the training classes (--data, or its train/).
std::string class_root(const TrainArgs& a) {
  const fs::path train = fs::path(a.data.data) / "train";
  return holds_class_folders(train.string()) ? train.string() : a.data.data;
}

[[noreturn]] void refuse_one_class(const TrainArgs& a, const DataSplits& data) {
  const std::vector<std::string> names = data.train->class_names();
  const std::string why =
      "every label is the same, so a model learns nothing about the images (its loss goes to 0 and its accuracy "
      "to 1.0 on anything)";
  const DatasetFormat* format = find_dataset_format(data.format);
  if (format && format->class_folders && names.size() == 1) {
    const std::string root = class_root(a);
    const std::string only = (fs::path(root) / names[0]).string();
    if (holds_class_folders(only))
      fail("image folder '{}' holds one class folder, '{}': {}. '{}' holds folders itself: if those are the classes, "
           "give it as the data (--data {})", root, names[0], why, only, only);
    fail("image folder '{}' holds one class folder, '{}': {}. A classifier needs at least two classes: put each "
         "class's images in a folder of its own under '{}'", root, names[0], why, root);
  }
  fail("the training set of '{}' ({}) holds one class: {}. A classifier needs at least two classes", a.data.data,
       data.format, why);
}

}  // namespace

void check_class_count(const TrainArgs& a, const DataSplits& data) {
  if (data.train->num_classes() < 2) refuse_one_class(a, data);
  if (!data.train_data) return;  // named classes (folders, packs) each hold a sample by construction
  const Dataset& train = *data.train_data;
  const std::vector<int> empty = classes_without_samples(train.labels, train.num_classes);
  if (empty.empty()) return;
  fmt::print(stderr,
             "warning: {} of the {} classes the training labels of {} name ({} format, classes 0-{}) have no "
             "training sample: class{} {}. The model has an output for each, never trained, so it will not "
             "predict them; if those labels do not exist, renumber the classes 0..N-1\n",
             empty.size(), train.num_classes, a.data.data, data.format, train.num_classes - 1,
             empty.size() == 1 ? "" : "es", class_ranges(empty));
}

}  // namespace kiln::cli

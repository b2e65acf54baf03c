// The rows of dataset_formats.h: each format's name, description, detection and reader. Every field
// is spelled out (nullptr where a format has none): -Wmissing-field-initializers.
#include "data/dataset_formats.h"

#include <array>
#include <memory>

#include "data/image_folder/image_folder_dataset.h"
#include "data/in_memory_formats.h"
#include "data/pack/open_packed.h"
#include "kiln/error.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

constexpr const char* kAuto = "auto";  // --format's default: detect the format

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// A format read whole into memory, both splits held by the DataSplits, read through load_dataset
// (which names how to get the data when the folder is missing).
DataSplits open_in_memory(const std::string& dir, const DataOptions& o, const char* format) {
  DataSplits splits;
  splits.train_data = std::make_shared<Dataset>(load_dataset(dir, format, true));
  splits.test_data = std::make_shared<Dataset>(load_dataset(dir, format, false));
  splits.train = std::make_unique<DatasetSource>(*splits.train_data, o.augment);
  splits.test = std::make_unique<DatasetSource>(*splits.test_data);
  return splits;
}

// In the order detect_dataset_format tries them: the image folder last, since any subfolder makes one.
const std::array<DatasetFormat, 4> kFormats = {{
    {.name = "idx",
     .description = "IDX files (train-images-idx3-ubyte)",
     .test_split_name = [](const std::string& dir,
                           const std::string&) { return "the test set (" + dir + "/t10k-images-idx3-ubyte)"; },
     .class_folders = false,
     .detect = [](const fs::path& d) { return path_exists(d / "train-images-idx3-ubyte"); },
     .open = [](const std::string& dir, const DataOptions& o) { return open_in_memory(dir, o, "idx"); },
     .refuse_near_miss = nullptr,
     .load = load_idx_dir,
     .missing_fix = "for the digits dataset run scripts/setup.sh, which builds it with kiln_make_digits; for MNIST "
                    "put the four *-ubyte files there"},
    {.name = "cifar10",
     .description = "CIFAR-10 batches (test_batch.bin)",
     .test_split_name = [](const std::string& dir,
                           const std::string&) { return "the test set (test_batch.bin of " + dir + ")"; },
     .class_folders = false,
     .detect =
         [](const fs::path& d) {
           return path_exists(d / "test_batch.bin") || path_exists(d / "cifar-10-batches-bin" / "test_batch.bin");
         },
     .open = [](const std::string& dir, const DataOptions& o) { return open_in_memory(dir, o, "cifar10"); },
     .refuse_near_miss = nullptr,
     .load = load_cifar_dir,
     .missing_fix = "download cifar-10-binary.tar.gz from https://www.cs.toronto.edu/~kriz/cifar.html and extract "
                    "it there"},
    {.name = "packed",
     .description = "kiln pack (kiln-pack.json)",
     .test_split_name = [](const std::string& dir, const std::string&) { return "the validation split of " + dir; },
     .class_folders = false,
     .detect = [](const fs::path& d) { return path_exists(d / "kiln-pack.json"); },
     .open = open_packed_dataset,
     .refuse_near_miss = nullptr,
     .load = nullptr,
     .missing_fix = nullptr},
    {.name = "imagefolder",
     .description = "class subfolders of images",
     .test_split_name =
         [](const std::string& dir, const std::string& val) {
           return "the validation folder " + (val.empty() ? dir + "/val" : val);
         },
     .class_folders = true,
     .detect = [](const fs::path& d) { return holds_class_folders(d.string()); },
     .open = open_image_folder_dataset,
     .refuse_near_miss = refuse_images_without_class_folders,
     .load = nullptr,
     .missing_fix = nullptr},
}};

}  // namespace

std::span<const DatasetFormat> dataset_formats() { return kFormats; }

const DatasetFormat* find_dataset_format(const std::string& name) {
  for (const DatasetFormat& f : kFormats)
    if (name == f.name) return &f;
  return nullptr;
}

const DatasetFormat* chosen_dataset_format(const std::string& choice) {
  if (choice == kAuto) return nullptr;
  if (const DatasetFormat* f = find_dataset_format(choice)) return f;
  fail("unknown dataset format '{}': use {}", choice, dataset_format_choices());
}

std::string dataset_format_choices(const std::string& auto_words) {
  std::vector<std::string> choices = {auto_words};
  for (const DatasetFormat& f : kFormats) choices.push_back(f.name);
  return spoken_list(choices, " or ");
}

std::string spoken_list(const std::vector<std::string>& items, const std::string& last_joint) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : i + 1 == items.size() ? last_joint : ", ") + items[i];
  return out;
}

}  // namespace kiln

// Finds a dataset's files by their standard names inside a directory (in_memory_formats.h), and
// load_dataset over the formats read whole into memory (their rows in dataset_formats.cpp).
#include <algorithm>
#include <filesystem>

#include "data/dataset_formats.h"
#include "data/idx_labels.h"
#include "data/in_memory_formats.h"
#include "data/labels/class_coverage.h"
#include "kiln/data.h"
#include "kiln/error.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

std::string join(const fs::path& dir, const std::string& name) { return (dir / name).string(); }

// "'idx' or 'cifar10'": the formats load_dataset reads.
std::string in_memory_format_names() {
  std::vector<std::string> names;
  for (const DatasetFormat& f : dataset_formats())
    if (f.load) names.push_back(fmt::format("'{}'", f.name));
  return spoken_list(names, " or ");
}

}  // namespace

// As many classes as the training labels name (the largest + 1), up to the 256 a label byte holds:
// digits have 10, EMNIST 47, a user's set its own. Both splits take the training labels' classes
// (a test split without a sample of the last class still has its output), and labels that cannot
// be a data set's classes are refused (data/labels/class_coverage.h).
Dataset load_idx_dir(const fs::path& dir, bool train) {
  std::string prefix = train ? "train" : "t10k";
  const std::string labels_path = join(dir, prefix + "-labels-idx1-ubyte");
  Dataset ds = read_idx(join(dir, prefix + "-images-idx3-ubyte"), labels_path, 256);
  const std::string training_labels = join(dir, "train-labels-idx1-ubyte");
  std::error_code ec;
  // A test split alone (a folder without training files) takes its own labels' range.
  const std::vector<int32_t> reference =
      train || !fs::exists(training_labels, ec) ? ds.labels : read_idx_labels(training_labels);
  check_training_labels(reference, train ? labels_path : training_labels);
  int32_t largest = -1;
  for (int32_t label : reference) largest = std::max(largest, label);
  ds.num_classes = largest + 1;
  if (!train) check_test_labels(ds.labels, ds.num_classes, labels_path, training_labels);
  return ds;
}

Dataset load_cifar_dir(const fs::path& folder, bool train) {
  fs::path dir = folder;
  // Accept both the extracted archive's parent and cifar-10-batches-bin itself.
  if (!fs::exists(dir / "test_batch.bin") && fs::is_directory(dir / "cifar-10-batches-bin"))
    dir /= "cifar-10-batches-bin";
  std::vector<std::string> files;
  if (train) {
    for (int i = 1; i <= 5; ++i) files.push_back(join(dir, "data_batch_" + std::to_string(i) + ".bin"));
  } else {
    files.push_back(join(dir, "test_batch.bin"));
  }
  return read_cifar10(files);
}

Dataset load_dataset(const std::string& dir, const std::string& format, bool train) {
  const DatasetFormat* f = find_dataset_format(format);
  if (!f) fail("unknown dataset format '{}': use {}", format, in_memory_format_names());
  if (!f->load)
    fail("load_dataset reads the formats held in memory ({}); '{}' is read file by file as it trains: open it "
         "with open_dataset", in_memory_format_names(), format);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail("dataset directory '{}' does not exist: {}", dir, f->missing_fix);
  return f->load(dir, train);
}

}  // namespace kiln

// A --data folder, whatever it holds, as training and evaluation sources: the format given or the
// first of dataset_formats() that recognizes the folder, opened by its row.
#include <filesystem>

#include "data/dataset_formats.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

const DatasetFormat& detect_format(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec))
    fail("dataset directory '{}' does not exist; for the digits data set run scripts/setup.sh, which makes "
         "data/digits", dir);
  const std::span<const DatasetFormat> formats = dataset_formats();
  for (const DatasetFormat& f : formats)
    if (f.detect(d)) return f;
  for (const DatasetFormat& f : formats)
    if (f.refuse_near_miss) f.refuse_near_miss(d);
  std::vector<std::string> lacks;
  for (const DatasetFormat& f : formats) lacks.push_back(std::string("no ") + f.description);
  fail("cannot tell what dataset folder '{}' holds: it has {}; name the format with --format", dir,
       spoken_list(lacks, " and "));
}

}  // namespace

std::string detect_dataset_format(const std::string& dir) { return detect_format(dir).name; }

DataSplits open_dataset(const std::string& dir, const DataOptions& o) {
  const DatasetFormat* chosen = chosen_dataset_format(o.format);
  const DatasetFormat& format = chosen ? *chosen : detect_format(dir);
  DataSplits splits = format.open(dir, o);
  splits.format = format.name;
  return splits;
}

}  // namespace kiln

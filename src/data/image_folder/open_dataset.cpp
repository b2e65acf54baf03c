// A --data folder, whatever it holds, as training and evaluation sources.
#include <algorithm>
#include <filesystem>

#include "data/image_folder/checked_folder.h"
#include "data/image_folder/file_records.h"
#include "data/image_folder/folder_walk.h"
#include "data/image_folder/image_source.h"
#include "data/pack/open_packed.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// Scanned, every file checked (checked_folder.h), then opened as sources.
DataSplits open_image_folders(const fs::path& dir, const DataOptions& o) {
  ImageFolderSplits found = scan_image_folder_splits(dir.string(), o.val, o.skip_bad,
                                                     "convert them, remove them, or pass --skip-bad to leave them out");
  CheckedFolder checked = check_image_folder(std::move(found), o, dir.string());
  DataSplits splits;
  splits.format = "imagefolder";
  splits.transform = checked.transform;
  auto open = [&](CheckedSplit& s, bool train) {
    std::vector<std::string> classes = s.index.classes;
    return std::make_unique<ImageSource>(std::make_unique<FileRecords>(std::move(s.index)), std::move(classes),
                                         checked.transform, train, o.skip_bad, s.left_out);
  };
  splits.train = open(checked.train, true);
  splits.test = open(checked.val, false);
  return splits;
}

}  // namespace

std::unique_ptr<SampleSource> open_image_folder(ImageFolderIndex index, const ImageTransform& transform, bool train,
                                                bool skip_bad) {
  std::vector<std::string> classes = index.classes;
  return std::make_unique<ImageSource>(std::make_unique<FileRecords>(std::move(index)), std::move(classes), transform,
                                       train, skip_bad);
}

std::string detect_dataset_format(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::is_directory(d, ec))
    fail("dataset directory '{}' does not exist; for the digits data set run scripts/setup.sh, which makes "
         "data/digits", dir);
  if (path_exists(d / "train-images-idx3-ubyte")) return "idx";
  if (path_exists(d / "test_batch.bin") || path_exists(d / "cifar-10-batches-bin" / "test_batch.bin")) return "cifar10";
  if (path_exists(d / "kiln-pack.json")) return "packed";
  if (holds_class_folders(dir)) return "imagefolder";
  // Images directly inside: usually --data one level too deep, at one class's folder.
  size_t images = 0;
  for (auto it = fs::directory_iterator(d, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    images += readable_image_name(it->path().filename().string()) ? 1 : 0;
  if (images > 0) {
    const std::string parent = fs::absolute(d, ec).lexically_normal().parent_path().string();
    fail("dataset folder '{}' holds {} image{} but no class subfolders: an image folder holds one subfolder per "
         "class (DIR/cat/1.jpg, DIR/dog/2.jpg), and its labels are those folders. If '{}' is one class's folder, "
         "give the folder above it (--data {})", dir, images, images == 1 ? "" : "s", dir, parent);
  }
  fail("cannot tell what dataset folder '{}' holds: it has no IDX files (train-images-idx3-ubyte), no CIFAR-10 "
       "batches (test_batch.bin), no kiln pack (kiln-pack.json) and no class subfolders of images; name the "
       "format with --format", dir);
}

DataSplits open_dataset(const std::string& dir, const DataOptions& o) {
  const std::string format = o.format == "auto" ? detect_dataset_format(dir) : o.format;
  if (format == "imagefolder") return open_image_folders(dir, o);
  if (format == "packed") {
    DataSplits splits = open_packed_dataset(dir, o);
    splits.transform = o.transform;  // as given: a pack's images are not looked at before training
    return splits;
  }
  if (format == "idx" || format == "cifar10") {
    DataSplits splits;
    splits.format = format;
    splits.train_data = std::make_shared<Dataset>(load_dataset(dir, format, true));
    splits.test_data = std::make_shared<Dataset>(load_dataset(dir, format, false));
    splits.train = std::make_unique<DatasetSource>(*splits.train_data, o.augment);
    splits.test = std::make_unique<DatasetSource>(*splits.test_data);
    return splits;
  }
  fail("unknown dataset format '{}': use auto, idx, cifar10, imagefolder or packed", format);
}

}  // namespace kiln

// A --data folder, whatever it holds, as training and evaluation sources.
#include <algorithm>
#include <filesystem>

#include "data/image_folder/file_records.h"
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

bool has_class_folders(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec) && it->path().filename().string().rfind('.', 0) != 0) return true;
  }
  return false;
}

// Names in `a` missing from `b`, at most 5, for a message.
std::string missing(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> out;
  for (const std::string& name : a)
    if (!std::binary_search(b.begin(), b.end(), name)) out.push_back("'" + name + "'");
  const size_t all = out.size();
  if (out.size() > 5) out.resize(5);
  return fmt::format("{}{}", fmt::join(out, ", "), all > 5 ? fmt::format(" and {} more", all - 5) : "");
}

void refuse_unsupported(const ImageFolderIndex& index) {
  if (index.unsupported.empty()) return;
  const size_t n = index.unsupported.size();
  fail("image folder '{}' holds {} image{} in formats kiln cannot read (the first: '{}'); kiln reads JPEG and PNG: "
       "convert them, remove them, or pass --skip-bad to leave them out", index.root, n, n == 1 ? "" : "s",
       index.unsupported.front());
}

DataSplits open_image_folders(const fs::path& dir, const DataOptions& o) {
  fs::path train_dir = dir, val_dir;
  if (has_class_folders(dir / "train")) {
    train_dir = dir / "train";
    if (path_exists(dir / "val")) val_dir = dir / "val";
  }
  if (!o.val.empty()) val_dir = o.val;
  ImageFolderIndex train = scan_image_folder(train_dir.string());
  if (!o.skip_bad) refuse_unsupported(train);
  DataSplits splits;
  splits.format = "imagefolder";
  std::vector<std::string> classes = train.classes;
  splits.train = open_image_folder(std::move(train), o.transform, true, o.skip_bad);
  if (!val_dir.empty()) {
    ImageFolderIndex val = scan_image_folder(val_dir.string());
    if (!o.skip_bad) refuse_unsupported(val);
    if (val.classes != classes)
      fail("the training folder '{}' and the validation folder '{}' hold different classes (only in training: {}; "
           "only in validation: {}); labels are the classes' ranks by name, so both must hold the same class "
           "folders (an empty one is not allowed)", train_dir.string(), val_dir.string(),
           missing(classes, val.classes), missing(val.classes, classes));
    splits.test = open_image_folder(std::move(val), o.transform, false, o.skip_bad);
  } else {
    ImageFolderIndex none;
    none.root = train_dir.string();
    none.classes = classes;
    splits.test = open_image_folder(std::move(none), o.transform, false, o.skip_bad);
  }
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
  if (has_class_folders(d)) return "imagefolder";
  fail("cannot tell what dataset folder '{}' holds: it has no IDX files (train-images-idx3-ubyte), no CIFAR-10 "
       "batches (test_batch.bin), no kiln pack (kiln-pack.json) and no class subfolders of images; name the "
       "format with --format", dir);
}

DataSplits open_dataset(const std::string& dir, const DataOptions& o) {
  const std::string format = o.format == "auto" ? detect_dataset_format(dir) : o.format;
  if (format == "imagefolder") return open_image_folders(dir, o);
  if (format == "packed") return open_packed_dataset(dir, o);
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

// An image folder as training and evaluation sources (see image_folder_dataset.h).
#include "data/image_folder/image_folder_dataset.h"

#include <memory>
#include <vector>

#include "data/image_folder/checked_folder.h"
#include "data/image_folder/file_records.h"
#include "data/image_folder/folder_walk.h"
#include "data/image_folder/image_source.h"
#include "kiln/error.h"

namespace kiln {
namespace fs = std::filesystem;

std::unique_ptr<SampleSource> open_image_folder(ImageFolderIndex index, const ImageTransform& transform, bool train,
                                                bool skip_bad) {
  std::vector<std::string> classes = index.classes;
  return std::make_unique<ImageSource>(std::make_unique<FileRecords>(std::move(index)), std::move(classes), transform,
                                       train, skip_bad);
}

DataSplits open_image_folder_dataset(const std::string& dir, const DataOptions& o) {
  ImageFolderSplits found = scan_image_folder_splits(dir, o.val, o.skip_bad,
                                                     "convert them, remove them, or pass --skip-bad to leave them out");
  CheckedFolder checked = check_image_folder(std::move(found), o, dir);
  DataSplits splits;
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

void refuse_images_without_class_folders(const fs::path& dir) {
  std::error_code ec;
  size_t images = 0;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
    images += readable_image_name(it->path().filename().string()) ? 1 : 0;
  if (images == 0) return;
  const std::string parent = fs::absolute(dir, ec).lexically_normal().parent_path().string();
  fail("dataset folder '{}' holds {} image{} but no class subfolders: an image folder holds one subfolder per "
       "class (DIR/cat/1.jpg, DIR/dog/2.jpg), and its labels are those folders. If '{}' is one class's folder, "
       "give the folder above it (--data {})", dir.string(), images, images == 1 ? "" : "s", dir.string(), parent);
}

}  // namespace kiln

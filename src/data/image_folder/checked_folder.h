#pragma once
// An image folder's splits made ready for training before any sample is read: every file checked
// (file_check.h), the files that cannot be used refused or, with --skip-bad, left out; the
// transform chosen from the images' sizes when the user left it to kiln; with the plain
// transform, images of another size than the first refused or left out.
#include <string>
#include <vector>

#include "kiln/image_folder.h"

namespace kiln {

struct CheckedSplit {
  ImageFolderIndex index;
  std::vector<std::string> left_out;  // "why" per file left out (skip_bad), as decode errors read
  // Per file of index.files: its size as the transform will see it (after the EXIF orientation
  // when it is applied); 0 x 0 for a split that was not checked.
  struct Size {
    int width = 0, height = 0;
    bool operator==(const Size&) const = default;
  };
  std::vector<Size> sizes;
  bool checked = false;
};

struct CheckedFolder {
  CheckedSplit train, val;
  ImageTransform transform;  // as DataOptions gave it, or with its kind chosen
};

// `dir`: the --data folder, for messages. Throws kiln::Error naming the files and the fix;
// o.note hears what was decided for the user.
CheckedFolder check_image_folder(ImageFolderSplits splits, const DataOptions& o, const std::string& dir);

}  // namespace kiln

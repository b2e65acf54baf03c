#pragma once
// Training from image files: folders of JPEG/PNG files laid out as torchvision's ImageFolder
// reads them (one subfolder per class, classes sorted by name), the standard ImageNet recipe
// (RandomResizedCrop + flip for training, resize + center crop for evaluation), and the choice of
// a dataset's format by what its folder holds.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data.h"

namespace kiln {

// How an image file becomes a training or evaluation sample.
struct ImageTransform {
  enum class Kind {
    ImageNet,  // train: RandomResizedCrop(size) + flip; eval: Resize(eval_resize) + CenterCrop(size)
    Plain,     // images used at their own size (all alike), with Augment's padded crop and flip
  };
  Kind kind = Kind::ImageNet;
  int size = 224;         // side of the square samples (ImageNet kind)
  int eval_resize = 256;  // evaluation: the short side is resized to this before the center crop
  double scale_min = 0.08, scale_max = 1.0;         // RandomResizedCrop's area fraction
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;  // and aspect ratio range
  Augment augment{0, true};  // hflip for both kinds; pad_crop for Plain only
  int channels = 3;          // 3: RGB (PIL's convert('RGB')); 1: luma (PIL's convert('L'))
  // Training: decode JPEGs at 1/2, 1/4 or 1/8 scale (libjpeg-turbo's DCT scaling) when the crop
  // stays at least `size` pixels wide and high at that scale: a small crop of a large photo costs
  // a fraction of a full decode. Off: every image is decoded at full scale. Evaluation always
  // decodes at full scale, so its samples are torchvision's, pixel for pixel.
  bool dct_scaling = true;
  // Rotate/flip JPEGs as their EXIF orientation says. Off by default, as torchvision's loader
  // (PIL's Image.open) does not.
  bool exif_orientation = false;
  // Normalization: ImageNet's mean/std (3 channels), or the training set's own statistics
  // (every sample through the evaluation transform, or 10,000 spread over the set when larger).
  // Auto: ImageNet's for the ImageNet kind in RGB, else the data's.
  enum class Normalize { Auto, ImageNet, Dataset };
  Normalize normalize = Normalize::Auto;
};
// Checks every field (ranges, kinds that need 3 channels), naming the option and the fix.
void check_image_transform(const ImageTransform& transform);

// The files of one split: every JPEG/PNG under root/<class>/ (recursively, sorted), labelled by
// the class folder's rank among the sorted class names.
struct ImageFolderIndex {
  std::string root;
  std::vector<std::string> classes;
  std::vector<std::string> files;  // full paths
  std::vector<int32_t> labels;
  // Files with an image extension kiln cannot decode (.bmp, .webp, .tif, ...), left out of
  // `files`: open_dataset refuses the folder while there are any, unless bad files are skipped.
  std::vector<std::string> unsupported;
};
// Classes are the subfolders (links followed, hidden ones skipped) sorted by name; files are
// .jpg/.jpeg/.png (any case) found recursively, ordered by folder then name, as torchvision's
// ImageFolder orders them (sorted(os.walk(class folder, followlinks=True)), then sorted names).
// Files of non-image extensions are ignored, as torchvision does. A link to a file or a folder is
// followed once; class folders are walked in parallel on the pool. A dangling link with an image
// name is listed (the file check of open_dataset names it).
// Errors (kiln::Error naming the folder and the fix): no such folder, no class subfolders, a
// class folder without images, a folder that cannot be listed, a loop (a link to a folder the
// walk is inside, or above it: named with its target), and a file or folder reached by two paths
// (links: named with both paths), which would count twice.
ImageFolderIndex scan_image_folder(const std::string& root);

// Whether `dir` holds at least one class subfolder (a non-hidden folder).
bool holds_class_folders(const std::string& dir);

// The splits of an image folder: DIR/train and DIR/val when DIR/train holds class folders, else
// DIR alone for training; `val_dir`, when given, names the validation folder instead. Both are
// scanned, and must hold the same classes (kiln::Error listing the differences) and no file in
// common (a validation file that is a training file, by device and inode, is a kiln::Error naming
// both paths, unless both splits are one folder). Files of formats
// kiln cannot read are refused (naming the first, with `unsupported_fix`) unless
// `allow_unsupported`. Without a validation folder, `val` holds no files and train's classes.
struct ImageFolderSplits {
  ImageFolderIndex train, val;
};
ImageFolderSplits scan_image_folder_splits(const std::string& dir, const std::string& val_dir,
                                           bool allow_unsupported, const std::string& unsupported_fix);

// A split as a SampleSource: each sample is read, decoded and transformed when the loader asks
// for it (`train` picks the training or the evaluation transform). With `skip_bad`, a file that
// cannot be decoded is replaced by the next readable sample of the split (so batches keep their
// size and stay a pure function of the seed) and listed by skipped(); without it, it is a
// kiln::Error naming the file.
std::unique_ptr<SampleSource> open_image_folder(ImageFolderIndex index, const ImageTransform& transform, bool train,
                                                bool skip_bad = false);

// ---- dataset folders, whatever their format ----

// What a --data folder holds: "idx", "cifar10", "imagefolder" (class subfolders directly, or in
// train/ and val/), "packed" (kiln pack's output). A kiln::Error says what was found instead.
std::string detect_dataset_format(const std::string& dir);

struct DataOptions {
  std::string format = "auto";  // auto (detect_dataset_format), idx, cifar10, imagefolder, packed
  std::string val;              // image folders: the validation folder (default: <dir>/val)
  ImageTransform transform;     // image folders and packed files
  Augment augment;              // idx and cifar10
  // Image folders: every file of the splits checked is opened and its header and end validated
  // before any sample is made (src/data/image_folder/file_check.h); a file that fails is a
  // kiln::Error naming it, or, with skip_bad, left out of its split, listed by its source's
  // skipped() and in a note. A split that will not be read (kiln eval of one split) can be spared.
  bool skip_bad = false;
  bool check_train_files = true, check_val_files = true;
  // Image folders: the transform's kind chosen from the images (kiln train's --transform auto):
  // Plain when every image of both splits has one size, smaller than transform.size on both sides
  // (the ImageNet kind would upsample each to size x size), else ImageNet. The flips then follow
  // the kind chosen (on for ImageNet only) unless hflip_set. DataSplits::transform tells the choice.
  bool choose_transform = false;
  bool hflip_set = false;
  // What open_dataset decided for the user (the transform chosen, files left out by skip_bad),
  // one sentence each, for the caller to show.
  std::function<void(const std::string&)> note;
};

// The training and evaluation splits of a dataset folder, as sources. In-memory formats keep
// their Dataset here. The two splits of an image folder must hold the same classes.
struct DataSplits {
  std::shared_ptr<Dataset> train_data, test_data;  // idx and cifar10 only
  std::unique_ptr<SampleSource> train, test;       // test may hold no samples
  std::string format;                              // what was read
  ImageTransform transform;                        // image folders and packs: what the sources use
};
DataSplits open_dataset(const std::string& dir, const DataOptions& options);

}  // namespace kiln

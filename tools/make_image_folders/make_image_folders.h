#pragma once
// Test data for `--format imagefolder`, made from real pixels already on the machine:
//  - photo crops: an ImageNet-like folder (root/train/<class>/*.jpg, root/val/<class>/*.jpg) whose
//    classes are real photographs (Debian's opencv-doc ships a few hundred) and whose samples are
//    random crops of them, resized to ImageNet's spread of sizes and encoded as JPEGs of ImageNet's
//    kinds, with a few special files (grayscale, progressive, CMYK, EXIF-rotated) among them;
//  - the 5,000 real digits of the IDX "digits" dataset as 20x20 grayscale PNGs.
// Both are deterministic (the same bytes for the same inputs and seed, whatever the thread count),
// and never touch an existing non-empty folder: everything is written into "<out>.partial", which
// is renamed to <out> once complete, so an interrupted run leaves no half folder at <out>.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

inline constexpr const char* kOpencvDocDir = "/usr/share/doc/opencv-doc";

struct PhotoFolderOptions {
  std::string source = kOpencvDocDir;  // searched recursively for .jpg/.jpeg/.png (also *.dpkg-new)
  int classes = 0;           // source photos (= classes) used; 0: every qualifying one, at most 100
  int train_per_class = 100;
  int val_per_class = 20;
  uint64_t seed = 0;
  int max_side = 800;        // cap on an output image's longer side (>= 16)
  int min_source_side = 200;  // a source photo's shorter side must be at least this
  // Each block of this many consecutive samples of a split holds one file of each special kind
  // (grayscale, progressive, CMYK, EXIF orientation != 1) at random positions: 4 in 64, ~6%.
  int special_block = 64;
  int threads = 0;           // 0: kiln::threads()
  bool verbose = false;      // progress lines on stdout
};

// A photo that qualifies as a class: decodable JPEG/PNG, shorter side >= min_source_side, photo-like
// (varied pixels; no large flat areas, dominant colour, panel separators or window title bars: the
// opencv-doc tree also holds diagrams and screenshots), the first of its numbered series in its
// folder (left01.jpg .. left14.jpg are shots of one scene) and no copy of an earlier one.
struct SourcePhoto {
  std::string path;        // the file as found (may end in .dpkg-new)
  std::string class_name;  // from the file name: lowercase [a-z0-9_], unique among the sources
  int width = 0, height = 0;
};

// The qualifying photos under options.source, in the order classes are chosen from (JPEGs before
// PNGs, then by path). Errors (kiln::Error): the folder does not exist.
std::vector<SourcePhoto> find_source_photos(const PhotoFolderOptions& options);

// Writes out_dir/train/<class>/NNNN.jpg (train_per_class each) and out_dir/val/<class>/NNNN.jpg
// (val_per_class each); train and val crops come from separate random streams. Errors
// (kiln::Error): out_dir exists and is not an empty folder, too few qualifying photos for
// options.classes, bad options, unwritable output.
void make_photo_folder(const PhotoFolderOptions& options, const std::string& out_dir);

// Writes the IDX dataset in idx_dir (train-* and t10k-* files, see load_dataset) as
// out_dir/train/<label>/<index>.png and out_dir/val/<label>/<index>.png: 8-bit grayscale PNGs,
// pixel for pixel the IDX images, <index> the sample's position in its IDX file, zero-padded (at
// least 4 digits); <label> is zero-padded to the width of the largest label, and a label without
// samples gets no folder. `threads` 0: kiln::threads().
// Errors (kiln::Error): as make_photo_folder's, and unreadable IDX files.
void make_digits_png_folder(const std::string& idx_dir, const std::string& out_dir, int threads = 0);

}  // namespace kiln

#pragma once
// The check of an image folder's files before training: every file of both splits opened, its
// header read and validated, and its end looked at, in parallel on the pool, so that a file the
// decoder would refuse mid-run (in the first evaluation, hours in) is named before the first step.
//
// The check agrees with the decoder (data/image/image_codec.h): a file it refuses, decode_image
// refuses too. It reads the first kHeadBytes and the last kTailBytes of each file:
// - the header must parse (read_image_info), read again from the whole file when it reaches past
//   the head (a large EXIF block), as the decoder reads it;
// - a JPEG must end in an EOI marker (FF D9) after its first scan's header, a PNG in its IEND
//   chunk. A header read alone does not see a truncated file, and a truncated JPEG or PNG lacks
//   that end. A file whose end is not there (truncated, or trailed by other data) is decoded whole
//   here, and refused only when that decode fails: so a file with extra bytes after its end, which
//   the decoder accepts, passes.
// Corrupt data between the header and the end is left to the decoder (what PIL reads past with a
// warning, libjpeg does too).
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

inline constexpr size_t kHeadBytes = 16 * 1024;
inline constexpr size_t kTailBytes = 4 * 1024;

struct ImageFileCheck {
  int width = 0, height = 0;  // as stored (before any EXIF orientation)
  int orientation = 1;        // EXIF orientation tag, 1..8
  std::string error;          // empty: the file passed; else why not, naming the file
  bool ok() const { return error.empty(); }
};

// One file.
ImageFileCheck check_image_file(const std::string& path);

// Every file, on the pool (kiln/threads.h), in the order given.
std::vector<ImageFileCheck> check_image_files(const std::vector<std::string>& paths);

}  // namespace kiln

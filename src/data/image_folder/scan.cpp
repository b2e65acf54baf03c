// torchvision's ImageFolder layout: root/<class>/**/<image>.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <utility>

#include "kiln/error.h"
#include "kiln/image_folder.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

bool readable_image(const std::string& ext) { return ext == ".jpg" || ext == ".jpeg" || ext == ".png"; }

// The other extensions torchvision's ImageFolder takes as images: a folder holding them would
// train on them there, so kiln must not silently leave them out.
bool other_image(const std::string& ext) {
  return ext == ".bmp" || ext == ".ppm" || ext == ".pgm" || ext == ".tif" || ext == ".tiff" || ext == ".webp" ||
         ext == ".gif";
}

bool hidden(const fs::path& p) { return p.filename().string().rfind('.', 0) == 0; }

// Image files under `dir`, ordered as sorted(os.walk(dir)) then sorted file names.
void collect(const fs::path& dir, std::vector<std::string>& images, std::vector<std::string>& unsupported) {
  std::vector<std::pair<std::string, std::string>> found;  // (folder, file name)
  std::error_code ec;
  auto options = fs::directory_options::follow_directory_symlink | fs::directory_options::skip_permission_denied;
  for (auto it = fs::recursive_directory_iterator(dir, options, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code type_ec;
    if (!it->is_regular_file(type_ec)) continue;
    const fs::path& p = it->path();
    const std::string ext = lower_extension(p);
    if (readable_image(ext))
      found.emplace_back(p.parent_path().string(), p.filename().string());
    else if (other_image(ext))
      unsupported.push_back(p.string());
  }
  if (ec) fail("cannot list image folder '{}': {}; check its permissions", dir.string(), ec.message());
  std::sort(found.begin(), found.end());
  for (const auto& [folder, name] : found) images.push_back((fs::path(folder) / name).string());
}

// Names in `a` missing from `b` (sorted), at most 5, for a message.
std::string missing(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> out;
  for (const std::string& name : a)
    if (!std::binary_search(b.begin(), b.end(), name)) out.push_back("'" + name + "'");
  const size_t all = out.size();
  if (out.size() > 5) out.resize(5);
  return fmt::format("{}{}", fmt::join(out, ", "), all > 5 ? fmt::format(" and {} more", all - 5) : "");
}

void refuse_unsupported(const ImageFolderIndex& index, const std::string& fix) {
  if (index.unsupported.empty()) return;
  const size_t n = index.unsupported.size();
  fail("image folder '{}' holds {} image{} in formats kiln cannot read (the first: '{}'); kiln reads JPEG and PNG: "
       "{}", index.root, n, n == 1 ? "" : "s", index.unsupported.front(), fix);
}

}  // namespace

bool holds_class_folders(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec) && !hidden(it->path())) return true;
  }
  return false;
}

ImageFolderSplits scan_image_folder_splits(const std::string& dir, const std::string& val_dir,
                                           bool allow_unsupported, const std::string& unsupported_fix) {
  fs::path train = dir, val = val_dir;
  if (holds_class_folders((fs::path(dir) / "train").string())) {
    train = fs::path(dir) / "train";
    std::error_code ec;
    if (val.empty() && fs::exists(fs::path(dir) / "val", ec)) val = fs::path(dir) / "val";
  }
  ImageFolderSplits splits;
  splits.train = scan_image_folder(train.string());
  if (!allow_unsupported) refuse_unsupported(splits.train, unsupported_fix);
  if (val.empty()) {
    splits.val.root = train.string();
    splits.val.classes = splits.train.classes;
    return splits;
  }
  splits.val = scan_image_folder(val.string());
  if (!allow_unsupported) refuse_unsupported(splits.val, unsupported_fix);
  const std::vector<std::string>& a = splits.train.classes;
  const std::vector<std::string>& b = splits.val.classes;
  if (a != b)
    fail("the training folder '{}' and the validation folder '{}' hold different classes (only in training: {}; "
         "only in validation: {}); labels are the classes' ranks by name, so both must hold the same class "
         "folders (an empty one is not allowed)", train.string(), val.string(), missing(a, b), missing(b, a));
  return splits;
}

ImageFolderIndex scan_image_folder(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    fail("image folder '{}' does not exist (or is not a folder); an image folder holds one subfolder per class, "
         "e.g. {}/cat/1.jpg, {}/dog/2.jpg", root, root, root);
  ImageFolderIndex index;
  index.root = root;
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec) && !hidden(it->path())) index.classes.push_back(it->path().filename().string());
  }
  if (ec) fail("cannot list image folder '{}': {}; check its permissions", root, ec.message());
  if (index.classes.empty())
    fail("image folder '{}' has no class subfolders; put each class's images in a subfolder named after the class, "
         "e.g. {}/cat/1.jpg", root, root);
  std::sort(index.classes.begin(), index.classes.end());
  for (size_t c = 0; c < index.classes.size(); ++c) {
    const size_t before = index.files.size(), unsupported_before = index.unsupported.size();
    collect(fs::path(root) / index.classes[c], index.files, index.unsupported);
    if (index.files.size() == before) {
      const size_t others = index.unsupported.size() - unsupported_before;
      fail("class folder '{}' holds no JPEG or PNG images{}; add images or remove the folder",
           (fs::path(root) / index.classes[c]).string(),
           others ? fmt::format(" ({} files of other image formats, which kiln cannot read: convert them to JPEG or "
                                "PNG)", others)
                  : "");
    }
    index.labels.resize(index.files.size(), int32_t(c));
  }
  return index;
}

}  // namespace kiln

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

}  // namespace

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

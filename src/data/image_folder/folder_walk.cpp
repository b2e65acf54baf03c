#include "data/image_folder/folder_walk.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "kiln/error.h"

namespace kiln {
namespace {

std::string lower_extension(const std::string& name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return {};  // ".png" alone is a hidden file, as Python's splitext says
  std::string ext = name.substr(dot);
  for (char& c : ext) c = char(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

FileId id_of(const struct stat& st) { return {st.st_dev, st.st_ino}; }

// The link's own text ("..", "/data/x"), for messages.
std::string link_text(const std::string& path) {
  std::string target(4096, '\0');
  const ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
  return n < 0 ? std::string("?") : target.substr(0, size_t(n));
}

// The real path (links resolved), or empty.
std::string real_path(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> p(::realpath(path.c_str(), nullptr), &std::free);
  return p ? std::string(p.get()) : std::string();
}

// Whether `outer` is `inner` or one of the folders above it (both real paths).
bool contains(const std::string& outer, const std::string& inner) {
  if (outer.empty() || inner.empty()) return false;
  if (outer == "/" || outer == inner) return true;
  return inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 && inner[outer.size()] == '/';
}

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

struct Subfolder {
  std::string name;
  FileId id;
  bool link = false;
};

class Walker {
 public:
  Walker(FolderWalk& out, std::vector<FileId> inside) : out_(out), inside_(std::move(inside)) {}

  void walk(const std::string& dir, const std::string& via_link) {
    std::vector<Subfolder> subfolders;
    list(dir, via_link, subfolders);
    // Sorted, so that of several loops the same one is named whatever order the disk lists them.
    std::sort(subfolders.begin(), subfolders.end(),
              [](const Subfolder& a, const Subfolder& b) { return a.name < b.name; });
    for (const Subfolder& sub : subfolders) {
      const std::string path = dir + "/" + sub.name;
      if (sub.link) refuse_link_loop(dir, path, sub.id);
      else if (std::find(inside_.begin(), inside_.end(), sub.id) != inside_.end())
        fail("image folder loop: '{}' is a folder that holds itself (a bind mount of a folder above it?), so the "
             "walk would reach the same images again and again; unmount it or move the images out", path);
      const auto [first, fresh] = visited_.try_emplace(sub.id, Visit{path, 0});
      if (!fresh) {
        // Reached before by another path: its images are listed once, and scan.cpp names both
        // paths if there are any (a folder without images counts for nothing).
        if (first->second.images > 0) out_.revisits.push_back({path, first->second.path, first->second.images,
                                                               sub.link ? describe(path) : via_link});
        continue;
      }
      inside_.push_back(sub.id);
      const size_t before = out_.images.size();
      walk(path, sub.link ? describe(path) : via_link);
      visited_[sub.id].images = out_.images.size() - before;
      inside_.pop_back();
    }
  }

 private:
  struct Visit {
    std::string path;
    size_t images = 0;
  };

  static std::string describe(const std::string& link) { return fmt::format("'{}' -> '{}'", link, link_text(link)); }

  // The entries of `dir`: images and other image formats into out_, folders into `subfolders`.
  void list(const std::string& dir, const std::string& via_link, std::vector<Subfolder>& subfolders) {
    std::unique_ptr<DIR, DirCloser> d(::opendir(dir.c_str()));
    if (!d)
      fail("cannot list folder '{}': {}; check that it exists and is readable (chmod)", dir, std::strerror(errno));
    const int fd = ::dirfd(d.get());
    for (;;) {
      errno = 0;
      const dirent* e = ::readdir(d.get());
      if (e == nullptr) {
        if (errno != 0) fail("cannot list folder '{}': {}; check the folder and the disk", dir, std::strerror(errno));
        break;
      }
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      bool link = e->d_type == DT_LNK;
      if (e->d_type == DT_UNKNOWN) {  // file systems that do not say: ask
        struct stat own {};
        link = ::fstatat(fd, e->d_name, &own, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(own.st_mode);
      }
      const std::string path = dir + "/" + name;
      struct stat st {};
      if (::fstatat(fd, e->d_name, &st, 0) != 0) {
        // A dangling link, a link to itself, or a file gone meanwhile: an image name stays in the
        // list, so that the file check names it as a file that cannot be opened (or --skip-bad
        // leaves it out), as torchvision lists it and fails when it loads it.
        if (readable_image_name(name)) out_.images.push_back({dir, name, {}, link ? describe(path) : via_link});
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        subfolders.push_back({name, id_of(st), link});
      } else if (S_ISREG(st.st_mode)) {
        if (readable_image_name(name)) out_.images.push_back({dir, name, id_of(st), link ? describe(path) : via_link});
        else if (other_image_name(name)) out_.unsupported.push_back(path);
      }
    }
  }

  // A link to a folder that the walk is inside, or that lies above the link's own place, would be
  // followed forever (os.walk follows it until the path is too long, listing every image again at
  // each level).
  void refuse_link_loop(const std::string& dir, const std::string& link, const FileId& target) {
    const std::string here = real_path(dir), there = real_path(link);
    const bool inside = std::find(inside_.begin(), inside_.end(), target) != inside_.end();
    if (!inside && !contains(there, here)) return;
    fail("image folder loop: '{}' is a link to '{}' ({}), a folder it lies inside, so following it would reach "
         "the same images again and again, under ever longer paths; remove the link (rm '{}'), or replace it by "
         "a copy of the images it should add", link, link_text(link), there.empty() ? "?" : there, link);
  }

  FolderWalk& out_;
  std::vector<FileId> inside_;
  std::map<FileId, Visit> visited_;
};

}  // namespace

bool readable_image_name(const std::string& name) {
  const std::string ext = lower_extension(name);
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// The other extensions torchvision's ImageFolder takes as images: a folder holding them would
// train on them there, so kiln must not silently leave them out.
bool other_image_name(const std::string& name) {
  const std::string ext = lower_extension(name);
  return ext == ".bmp" || ext == ".ppm" || ext == ".pgm" || ext == ".tif" || ext == ".tiff" || ext == ".webp" ||
         ext == ".gif";
}

FileId file_id(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? id_of(st) : FileId{};
}

std::vector<FileId> folder_and_ancestors(const std::string& dir) {
  std::vector<FileId> ids;
  std::string p = real_path(dir);
  while (!p.empty()) {
    if (const FileId id = file_id(p); id.known()) ids.push_back(id);
    if (p == "/") break;
    const size_t slash = p.rfind('/');
    p = slash == 0 ? "/" : p.substr(0, slash);
  }
  return ids;
}

FolderWalk walk_class_folder(const std::string& dir, const std::vector<FileId>& inside) {
  FolderWalk out;
  std::vector<FileId> start = inside;
  const FileId self = file_id(dir);
  if (std::find(start.begin(), start.end(), self) != start.end())
    fail("image folder loop: the class folder '{}' is a link to '{}', the folder that holds it, so its images "
         "would be every class's images again and again; remove the link (rm '{}')", dir, link_text(dir), dir);
  start.push_back(self);
  Walker(out, std::move(start)).walk(dir, "");
  return out;
}

}  // namespace kiln

#pragma once
// One class folder of an image folder, walked as torchvision's os.walk(followlinks=True) walks it,
// but safely: a link to a file or folder is followed once, a link back into a folder the walk is
// inside (a loop, which os.walk would follow until the path is too long) is a kiln::Error naming
// the link and its target, and every file found carries its identity (device and inode), so that
// a file reached by two paths can be told (scan.cpp refuses those).
#include <sys/types.h>

#include <compare>
#include <string>
#include <vector>

namespace kiln {

// What stat says a file is; {0, 0} when it could not be stat'ed (a dangling link).
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  auto operator<=>(const FileId&) const = default;
  bool known() const { return dev != 0 || ino != 0; }
};

struct WalkedFile {
  std::string folder, name;  // the path as the walk reached it (through links, as os.walk names it)
  FileId id;
  // The link the walk followed last to reach this file ("'a/l' -> '../b'"), or empty: a
  // duplicate's message says how the second path came about.
  std::string via_link;
};

// A folder reached a second time by another path (through a link), not walked again: its images
// would count twice.
struct FolderRevisit {
  std::string path, first_path;  // the second path, and the one its images are listed under
  size_t images = 0;             // below first_path (folders without images are not recorded)
  std::string via_link;          // as WalkedFile's
};

struct FolderWalk {
  std::vector<WalkedFile> images;        // .jpg/.jpeg/.png, any case; unsorted
  std::vector<std::string> unsupported;  // other image formats (.bmp, .webp, ...), full paths
  std::vector<FolderRevisit> revisits;
};

// Walks `dir` (a class folder) and every folder below it. `inside`: the identities of the folders
// the walk is already inside (the split's root and the folders above it, up to /): a link to one
// of them is a loop too. Throws kiln::Error for a loop and for a folder that cannot be listed.
FolderWalk walk_class_folder(const std::string& dir, const std::vector<FileId>& inside);

// The identities of `dir` and of every folder above it (its real path's, up to /), for
// walk_class_folder's `inside`.
std::vector<FileId> folder_and_ancestors(const std::string& dir);

// stat's identity of `path` (links followed); {0, 0} when stat fails.
FileId file_id(const std::string& path);

// Lowercased extension kinds of the scan.
bool readable_image_name(const std::string& name);  // .jpg, .jpeg, .png
bool other_image_name(const std::string& name);     // formats torchvision reads and kiln does not

}  // namespace kiln

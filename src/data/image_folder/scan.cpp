// torchvision's ImageFolder layout: root/<class>/**/<image>, each class folder walked on the pool
// (folder_walk.h), then every file reached by two paths refused.
#include <algorithm>
#include <filesystem>
#include <utility>

#include "core/parallel.h"
#include "data/image_folder/folder_walk.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"

namespace kiln {
namespace fs = std::filesystem;
namespace {

bool hidden(const fs::path& p) { return p.filename().string().rfind('.', 0) == 0; }

// A split as scanned, with what the duplicate checks need besides the index.
struct ScannedSplit {
  ImageFolderIndex index;
  std::vector<FileId> ids;              // per file of index.files
  std::vector<std::string> via_links;   // per file: the link that led to it, or empty
  std::vector<FolderRevisit> revisits;  // folders reached twice
  FileId root;
};

// "'a' is the same file as 'b' (through the link 'l' -> 't')", for the duplicate messages.
std::string same_file_text(const std::string& path, const std::string& first, const std::string& via_link) {
  return fmt::format("'{}' is the same file as '{}'{}", path, first,
                     via_link.empty() ? "" : fmt::format(" (reached through the link {})", via_link));
}

std::string listed(const std::vector<std::string>& items, size_t all) {
  return fmt::format("{}{}", fmt::join(items, "; "),
                     all > items.size() ? fmt::format("; and {} more", all - items.size()) : "");
}

// Files (or folders) reached by two paths would be trained on twice, each time under the class of
// its path: torchvision's ImageFolder does so without a word. kiln refuses, naming both paths.
void refuse_duplicates(const ScannedSplit& s) {
  const std::string& root = s.index.root;
  if (!s.revisits.empty()) {
    std::vector<std::string> items;
    for (size_t i = 0; i < std::min<size_t>(s.revisits.size(), 3); ++i) {
      const FolderRevisit& r = s.revisits[i];
      items.push_back(fmt::format("'{}' is the folder '{}' again{}, whose {} image{} would count twice", r.path,
                                  r.first_path,
                                  r.via_link.empty() ? "" : fmt::format(" (through the link {})", r.via_link), r.images,
                                  r.images == 1 ? "" : "s"));
    }
    fail("image folder '{}' reaches a folder by two paths: {}; remove the extra link, or, to count those images "
         "twice on purpose, copy them", root, listed(items, s.revisits.size()));
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < s.ids.size(); ++i)
    if (s.ids[i].known()) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s.ids[a] < s.ids[b]; });
  std::vector<std::string> items;
  size_t count = 0;
  for (size_t k = 1; k < order.size(); ++k) {
    const size_t first = order[k - 1], again = order[k];
    if (s.ids[first] != s.ids[again]) continue;
    if (++count <= 3) {
      const size_t dup = s.via_links[again].empty() && !s.via_links[first].empty() ? first : again;
      const size_t orig = dup == again ? first : again;
      items.push_back(same_file_text(s.index.files[dup], s.index.files[orig], s.via_links[dup]));
    }
  }
  if (count > 0)
    fail("image folder '{}' reaches {} image file{} by two paths, so {} would count twice (each time with the "
         "class of its path): {}; remove the extra link{}, or, to count a file twice on purpose, copy it",
         root, count, count == 1 ? "" : "s", count == 1 ? "it" : "they", listed(items, count), count == 1 ? "" : "s");
}

// A validation file that is also a training file makes the validation accuracy a training one.
// Not when both are the same folder: that evaluation on the training images is asked for.
void refuse_shared_files(const ScannedSplit& train, const ScannedSplit& val) {
  if (train.root == val.root) return;
  std::vector<std::pair<FileId, size_t>> train_ids;
  for (size_t i = 0; i < train.ids.size(); ++i)
    if (train.ids[i].known()) train_ids.emplace_back(train.ids[i], i);
  std::sort(train_ids.begin(), train_ids.end());
  std::vector<std::string> items;
  size_t count = 0;
  for (size_t i = 0; i < val.ids.size(); ++i) {
    if (!val.ids[i].known()) continue;
    const auto it = std::lower_bound(train_ids.begin(), train_ids.end(), std::make_pair(val.ids[i], size_t(0)));
    if (it == train_ids.end() || it->first != val.ids[i]) continue;
    if (++count <= 3)
      items.push_back(same_file_text(val.index.files[i], train.index.files[it->second], val.via_links[i]));
  }
  if (count > 0)
    fail("the validation folder '{}' shares {} image file{} with the training folder '{}', so the validation "
         "accuracy would be measured on images the model trains on: {}; remove {} from one of the two folders",
         val.index.root, count, count == 1 ? "" : "s", train.index.root, listed(items, count),
         count == 1 ? "it" : "them");
}

ScannedSplit scan_split(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    fail("image folder '{}' does not exist (or is not a folder); an image folder holds one subfolder per class, "
         "e.g. {}/cat/1.jpg, {}/dog/2.jpg", root, root, root);
  ScannedSplit s;
  ImageFolderIndex& index = s.index;
  index.root = root;
  s.root = file_id(root);
  for (auto it = fs::directory_iterator(root, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec) && !hidden(it->path())) index.classes.push_back(it->path().filename().string());
  }
  if (ec) fail("cannot list image folder '{}': {}; check its permissions", root, ec.message());
  if (index.classes.empty())
    fail("image folder '{}' has no class subfolders; put each class's images in a subfolder named after the class, "
         "e.g. {}/cat/1.jpg", root, root);
  std::sort(index.classes.begin(), index.classes.end());

  // Each class folder walked on the pool; errors kept per class, so the first class's is the one
  // reported whatever the threads' timing.
  const std::vector<FileId> inside = folder_and_ancestors(root);
  const size_t n = index.classes.size();
  std::vector<FolderWalk> walks(n);
  std::vector<std::string> errors(n);
  parallel_for(int64_t(n), [&](int64_t c) {
    try {
      walks[c] = walk_class_folder((fs::path(root) / index.classes[c]).string(), inside);
    } catch (const Error& e) {
      errors[c] = e.what();
    }
  });
  for (size_t c = 0; c < n; ++c) {
    if (!errors[c].empty()) throw Error(errors[c]);
    FolderWalk& w = walks[c];
    if (w.images.empty())
      fail("class folder '{}' holds no JPEG or PNG images{}; add images or remove the folder",
           (fs::path(root) / index.classes[c]).string(),
           w.unsupported.empty() ? ""
                                 : fmt::format(" ({} files of other image formats, which kiln cannot read: convert "
                                               "them to JPEG or PNG)", w.unsupported.size()));
    // Ordered as sorted(os.walk(class folder)) then sorted file names.
    std::sort(w.images.begin(), w.images.end(), [](const WalkedFile& a, const WalkedFile& b) {
      return std::tie(a.folder, a.name) < std::tie(b.folder, b.name);
    });
    for (WalkedFile& f : w.images) {
      index.files.push_back(f.folder + "/" + f.name);
      s.ids.push_back(f.id);
      s.via_links.push_back(std::move(f.via_link));
    }
    index.labels.resize(index.files.size(), int32_t(c));
    std::sort(w.unsupported.begin(), w.unsupported.end());
    for (std::string& u : w.unsupported) index.unsupported.push_back(std::move(u));
    for (FolderRevisit& r : w.revisits) s.revisits.push_back(std::move(r));
  }
  refuse_duplicates(s);
  return s;
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
  ScannedSplit train_split = scan_split(train.string());
  ImageFolderSplits splits;
  if (!allow_unsupported) refuse_unsupported(train_split.index, unsupported_fix);
  if (val.empty()) {
    splits.train = std::move(train_split.index);
    splits.val.root = train.string();
    splits.val.classes = splits.train.classes;
    return splits;
  }
  ScannedSplit val_split = scan_split(val.string());
  if (!allow_unsupported) refuse_unsupported(val_split.index, unsupported_fix);
  const std::vector<std::string>& a = train_split.index.classes;
  const std::vector<std::string>& b = val_split.index.classes;
  if (a != b)
    fail("the training folder '{}' and the validation folder '{}' hold different classes (only in training: {}; "
         "only in validation: {}); labels are the classes' ranks by name, so both must hold the same class "
         "folders (an empty one is not allowed)", train.string(), val.string(), missing(a, b), missing(b, a));
  refuse_shared_files(train_split, val_split);
  splits.train = std::move(train_split.index);
  splits.val = std::move(val_split.index);
  return splits;
}

ImageFolderIndex scan_image_folder(const std::string& root) { return scan_split(root).index; }

}  // namespace kiln

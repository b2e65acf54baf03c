// Fuzz target "folder_scan": the image-folder scan (scan_image_folder_splits: the walk of
// src/data/image_folder/folder_walk.cpp with its loop and duplicate checks) and, when asked, the
// file check and the sources open_dataset makes of what it found, over a tree of folders, files
// and links that the input describes, built each execution in an emptied tmpfs folder.
// Feeds: byte 0 (flags: bit 0 a train/ and val/ layout, bit 1 open_dataset after the scan, bit 2
// --skip-bad (unsupported formats and bad files allowed), bit 3 --transform auto, bit 4 plain),
// then operations of 4 bytes each, at most kMaxOps: kind, parent folder, name, target.
// Kinds (kind % 6): 0 a folder; 1 a small JPEG; 2 a small PNG; 3 a damaged image (half a JPEG,
// half a PNG, text or nothing); 4 a symbolic link, to "..", "../..", ".", a missing file, itself, or
// any node made before (relative or, target bit 7, absolute); 5 a hard link to a file made before.
// Names come from a small set (folders, image and other names, hidden ones), so mutations collide
// them, and every link target stays in the scratch folder or is a folder above it.
// Asserts: success or kiln::Error, no hang (libFuzzer's -timeout: loops must be refused, not
// walked); on success the classes are sorted and each holds files, sorted as torchvision sorts
// them, under its folder, labelled by its rank; no file is listed twice (device and inode), nor in
// both splits unless they are one folder; open_dataset's sources fill their samples' shape.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <utility>

#include "data/image/image_codec.h"
#include "fuzz_support.h"
#include "kiln/image_folder.h"

namespace kiln::fuzz {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxOps = 48;
constexpr const char* kNames[] = {"a", "b", "cls", "sub", "x.jpg", "y.png", "Z.JPEG", ".h.jpg", "w.bmp", "loop",
                                  "n.txt", "q.jpeg"};
constexpr const char* kSpecialTargets[] = {"..", "../..", ".", "missing.jpg"};  // then the link's own name

using Buffer = std::vector<uint8_t>;

Buffer tiny_picture(int w, int h, int c) {
  Buffer p(size_t(w) * h * c);
  for (size_t i = 0; i < p.size(); ++i) p[i] = uint8_t(i * 29 + 7);
  return p;
}
const Buffer& tiny_jpeg() {
  static const Buffer b = [] {
    const Buffer p = tiny_picture(8, 6, 3);
    return encode_jpeg(p.data(), 8, 6, 3);
  }();
  return b;
}
const Buffer& tiny_png() {
  static const Buffer b = [] {
    const Buffer p = tiny_picture(6, 6, 1);
    return encode_png(p.data(), 6, 6, 1);
  }();
  return b;
}

Buffer damaged(uint8_t which) {
  switch (which % 4) {
    case 0: return Buffer(tiny_jpeg().begin(), tiny_jpeg().begin() + long(tiny_jpeg().size() / 2));
    case 1: return Buffer(tiny_png().begin(), tiny_png().begin() + long(tiny_png().size() / 2));
    case 2: return Buffer{'h', 'e', 'l', 'l', 'o', '\n'};
    default: return {};
  }
}

void write_file(const fs::path& path, const Buffer& bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return;  // a name taken by a link to a folder, say: nothing made
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

struct Tree {
  fs::path root;                // the --data folder
  std::vector<fs::path> nodes;  // every folder and file made, in order (links too)
  std::vector<fs::path> dirs;   // real folders, where new nodes go
  std::vector<fs::path> files;  // regular files, for hard links
};

// Builds the tree the operations describe. A name already taken is skipped.
Tree build(ByteReader& r, bool splits) {
  Tree t;
  t.root = fs::path(scratch_dir()) / "data";
  fs::create_directories(t.root);
  t.nodes = t.dirs = {t.root};
  if (splits)
    for (const char* split : {"train", "val"}) {
      fs::create_directories(t.root / split);
      t.nodes.push_back(t.root / split);
      t.dirs.push_back(t.root / split);
    }
  for (size_t op = 0; op < kMaxOps && !r.rest().empty(); ++op) {
    const uint8_t kind = r.u8() % 6, where = r.u8(), name = r.u8(), target = r.u8();
    const fs::path parent = t.dirs[where % t.dirs.size()];
    const fs::path path = parent / kNames[name % std::size(kNames)];
    std::error_code ec;
    if (fs::symlink_status(path, ec).type() != fs::file_type::not_found) continue;
    switch (kind) {
      case 0:
        if (!fs::create_directory(path, ec)) continue;
        t.dirs.push_back(path);
        break;
      case 1: write_file(path, tiny_jpeg()); t.files.push_back(path); break;
      case 2: write_file(path, tiny_png()); t.files.push_back(path); break;
      case 3: write_file(path, damaged(target)); t.files.push_back(path); break;
      case 4: {
        const size_t k = target & 0x7f;
        fs::path to;
        if (k < std::size(kSpecialTargets)) to = kSpecialTargets[k];
        else if (k == std::size(kSpecialTargets)) to = path.filename();  // itself
        else {
          const fs::path& node = t.nodes[(k - std::size(kSpecialTargets) - 1) % t.nodes.size()];
          to = target & 0x80 ? node : node.lexically_relative(parent);
        }
        fs::create_symlink(to, path, ec);
        if (ec) continue;
        break;
      }
      default:
        if (t.files.empty()) continue;
        fs::create_hard_link(t.files[target % t.files.size()], path, ec);
        if (ec) continue;
        break;
    }
    t.nodes.push_back(path);
  }
  return t;
}

std::pair<dev_t, ino_t> identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {0, 0};  // a dangling link the file check names
  return {st.st_dev, st.st_ino};
}

// What the scan promises of a split.
void check_index(const ImageFolderIndex& ix, std::set<std::pair<dev_t, ino_t>>& seen) {
  KILN_FUZZ_CHECK(!ix.classes.empty());
  KILN_FUZZ_CHECK(std::is_sorted(ix.classes.begin(), ix.classes.end()));
  KILN_FUZZ_CHECK(std::adjacent_find(ix.classes.begin(), ix.classes.end()) == ix.classes.end());
  KILN_FUZZ_CHECK(ix.labels.size() == ix.files.size());
  std::vector<size_t> per_class(ix.classes.size(), 0);
  for (size_t i = 0; i < ix.files.size(); ++i) {
    const int32_t label = ix.labels[i];
    KILN_FUZZ_CHECK(label >= 0 && size_t(label) < ix.classes.size());
    KILN_FUZZ_CHECK(i == 0 || ix.labels[i - 1] <= label);
    const std::string folder = ix.root + "/" + ix.classes[size_t(label)] + "/";
    KILN_FUZZ_CHECK(ix.files[i].compare(0, folder.size(), folder) == 0);
    if (i > 0 && ix.labels[i - 1] == label) {  // sorted(os.walk) order: by folder, then name
      const fs::path a(ix.files[i - 1]), b(ix.files[i]);
      KILN_FUZZ_CHECK(std::make_pair(a.parent_path().string(), a.filename().string()) <
                      std::make_pair(b.parent_path().string(), b.filename().string()));
    }
    ++per_class[size_t(label)];
    const auto id = identity(ix.files[i]);
    if (id != std::make_pair(dev_t(0), ino_t(0))) KILN_FUZZ_CHECK(seen.insert(id).second);
  }
  for (size_t n : per_class) KILN_FUZZ_CHECK(n > 0);
}

void check_samples(const SampleSource& s) {
  const SampleShape shape = s.shape();
  KILN_FUZZ_CHECK(shape.height > 0 && shape.width > 0);
  std::vector<uint8_t> out(size_t(shape.size()) + 1, 0xa5);
  for (int64_t i = 0; i < std::min<int64_t>(s.count(), 2); ++i) {
    const int32_t label = s.write_sample(i, 3, 0, out.data());
    KILN_FUZZ_CHECK(label >= 0 && label < s.num_classes());
    KILN_FUZZ_CHECK(out.back() == 0xa5);
  }
}

}  // namespace

void folder_scan_input(Bytes input) {
  ByteReader r(input);
  const uint8_t flags = r.u8();
  clear_scratch();
  const Tree tree = build(r, flags & 1);
  const bool skip_bad = flags & 4;
  accept_kiln_errors([&] {
    const ImageFolderSplits s = scan_image_folder_splits(tree.root.string(), "", skip_bad, "");
    std::set<std::pair<dev_t, ino_t>> seen;
    check_index(s.train, seen);
    if (!s.val.files.empty()) {
      std::set<std::pair<dev_t, ino_t>> val_seen;
      check_index(s.val, val_seen);
      for (const auto& id : val_seen) KILN_FUZZ_CHECK(seen.count(id) == 0);  // distinct folders here
    }
    if (!(flags & 2)) return;
    DataOptions o;
    o.skip_bad = skip_bad;
    o.choose_transform = flags & 8;
    o.transform.kind = flags & 16 ? ImageTransform::Kind::Plain : ImageTransform::Kind::ImageNet;
    o.transform.size = 12;
    o.transform.eval_resize = 14;
    const DataSplits d = open_dataset(tree.root.string(), o);
    KILN_FUZZ_CHECK(d.train->count() <= int64_t(s.train.files.size()));
    KILN_FUZZ_CHECK(d.test->count() <= int64_t(s.val.files.size()));
    check_samples(*d.train);
    if (d.test->count() > 0) check_samples(*d.test);
  });
}

}  // namespace kiln::fuzz

KILN_FUZZ_TARGET(folder_scan_input)

#include "data/image_folder/checked_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "data/image_folder/file_check.h"
#include "data/labels/class_coverage.h"
#include "kiln/error.h"

namespace kiln {
namespace {

using Size = CheckedSplit::Size;
constexpr size_t kListed = 5;  // files named in a message; the rest counted

void tell(const DataOptions& o, const std::string& sentence) {
  if (o.note) o.note(sentence);
}

// The first kListed reasons, one per line, and how many more.
std::string lines(const std::vector<std::string>& reasons) {
  std::string out;
  for (size_t i = 0; i < std::min(reasons.size(), kListed); ++i) out += "\n  " + reasons[i];
  if (reasons.size() > kListed) out += fmt::format("\n  and {} more", reasons.size() - kListed);
  return out;
}

// Keeps the files of `s` whose `why` is empty; the others go to s.left_out.
void leave_out(CheckedSplit& s, const std::vector<std::string>& why) {
  ImageFolderIndex& ix = s.index;
  size_t kept = 0;
  for (size_t i = 0; i < ix.files.size(); ++i) {
    if (!why[i].empty()) {
      s.left_out.push_back(why[i]);
      continue;
    }
    if (kept != i) {
      ix.files[kept] = std::move(ix.files[i]);
      ix.labels[kept] = ix.labels[i];
      if (s.checked) s.sizes[kept] = s.sizes[i];
    }
    ++kept;
  }
  ix.files.resize(kept);
  ix.labels.resize(kept);
  if (s.checked) s.sizes.resize(kept);
}

// Refused, or with skip_bad left out: `why` per file of each split (empty: fine). `what` says what
// is wrong with them all, `fix` what to do besides --skip-bad ("IT" stands for "it" or "them").
void refuse_or_leave_out(CheckedFolder& f, const std::vector<std::string>& train_why,
                         const std::vector<std::string>& val_why, const DataOptions& o, const std::string& what,
                         const std::string& fix) {
  std::vector<std::string> reasons;
  for (const auto* why : {&train_why, &val_why})
    for (const std::string& w : *why)
      if (!w.empty()) reasons.push_back(w);
  if (reasons.empty()) return;
  const size_t total = f.train.index.files.size() + f.val.index.files.size();
  const std::string it = reasons.size() == 1 ? "it" : "them";
  std::string fix_text = fix;
  if (const size_t at = fix_text.find("IT"); at != std::string::npos) fix_text.replace(at, 2, it);
  if (!o.skip_bad)
    fail("{} of the {} image files {}, found before the first batch:{}\n{}, or pass --skip-bad to leave {} out "
         "(and list {})",
         reasons.size(), total, what, lines(reasons), fix_text, it, it);
  tell(o, fmt::format("--skip-bad: left out {} of the {} image files, which {} (listed at the end); the first: {}",
                      reasons.size(), total, what, reasons.front()));
  leave_out(f.train, train_why);
  leave_out(f.val, val_why);
}

// Every file of the splits checked in one pass on the pool; sizes recorded.
void check_files(CheckedFolder& f, const DataOptions& o) {
  std::vector<CheckedSplit*> splits;
  if (o.check_train_files) splits.push_back(&f.train);
  if (o.check_val_files) splits.push_back(&f.val);
  std::vector<std::string> paths;
  for (CheckedSplit* s : splits) paths.insert(paths.end(), s->index.files.begin(), s->index.files.end());
  const std::vector<ImageFileCheck> checks = check_image_files(paths);
  std::vector<std::string> train_why(f.train.index.files.size()), val_why(f.val.index.files.size());
  size_t at = 0;
  for (CheckedSplit* s : splits) {
    std::vector<std::string>& why = s == &f.train ? train_why : val_why;
    s->checked = true;
    s->sizes.resize(s->index.files.size());
    for (size_t i = 0; i < s->index.files.size(); ++i, ++at) {
      const ImageFileCheck& c = checks[at];
      why[i] = c.error;
      const bool swap = o.transform.exif_orientation && c.orientation >= 5;
      s->sizes[i] = swap ? Size{c.height, c.width} : Size{c.width, c.height};
    }
  }
  refuse_or_leave_out(f, train_why, val_why, o, "cannot be used", "re-encode or remove IT");
}

// The plain transform takes images of one size: the first training image's.
void check_one_size(CheckedFolder& f, const DataOptions& o) {
  if (!f.train.checked || f.train.index.files.empty()) return;
  const Size want = f.train.sizes.front();
  const std::string& first = f.train.index.files.front();
  std::vector<std::string> train_why(f.train.index.files.size()), val_why(f.val.index.files.size());
  for (CheckedSplit* s : {&f.train, &f.val}) {
    if (!s->checked) continue;
    std::vector<std::string>& why = s == &f.train ? train_why : val_why;
    for (size_t i = 0; i < s->index.files.size(); ++i)
      if (s->sizes[i] != want)
        why[i] = fmt::format("image '{}' is {}x{} but the folder's images are {}x{} (the size of '{}')",
                             s->index.files[i], s->sizes[i].width, s->sizes[i].height, want.width, want.height, first);
  }
  refuse_or_leave_out(f, train_why, val_why, o, "are not of one size, as --transform plain needs",
                      "resize IT, or use --transform imagenet (which brings every image to --image-size)");
}

// --transform auto: the plain transform for images all of one size smaller than the crop, which the
// imagenet transform would upsample (a folder of 20x20 digits becomes 224x224 crops, 125 times the
// pixels, and a run at the default learning rate diverges).
void choose_transform(CheckedFolder& f, const DataOptions& o, const std::string& dir) {
  ImageTransform& t = f.transform;
  std::vector<Size> sizes;
  for (const CheckedSplit* s : {&f.train, &f.val}) sizes.insert(sizes.end(), s->sizes.begin(), s->sizes.end());
  if (sizes.empty()) return;
  const bool one_size = std::all_of(sizes.begin(), sizes.end(), [&](const Size& s) { return s == sizes.front(); });
  int largest_w = 0, largest_h = 0;
  for (const Size& s : sizes) largest_w = std::max(largest_w, s.width), largest_h = std::max(largest_h, s.height);
  const bool small = largest_w < t.size && largest_h < t.size;
  if (one_size && small) {
    t.kind = ImageTransform::Kind::Plain;
    if (!o.hflip_set) t.augment.hflip = false;
    tell(o, fmt::format("every image of {} is {}x{}, smaller than --image-size {}: training on them at their own size "
                        "(--transform plain{}), not on {}x{} crops upsampled from them; --transform imagenet for "
                        "those",
                        dir, sizes.front().width, sizes.front().height, t.size,
                        t.augment.hflip ? ", with flips" : ", no flips", t.size, t.size));
    return;
  }
  t.kind = ImageTransform::Kind::ImageNet;
  if (!o.hflip_set) t.augment.hflip = true;
  if (small)
    tell(o, fmt::format("every image of {} is smaller than --image-size {} (the largest {}x{}), and they differ in "
                        "size: --transform imagenet upsamples each crop to {}x{}; a smaller --image-size may suit "
                        "them better",
                        dir, t.size, largest_w, largest_h, t.size, t.size));
}

// A class whose every training image was left out would be a class the model never sees.
void refuse_empty_classes(const CheckedSplit& train) {
  if (train.left_out.empty()) return;
  const std::vector<int> empty = classes_without_samples(train.index.labels, int(train.index.classes.size()));
  if (!empty.empty())
    fail("class folder '{}' has no image left to train on: --skip-bad left out every one of its files; fix or "
         "replace them, or remove the class folder",
         (std::filesystem::path(train.index.root) / train.index.classes[size_t(empty.front())]).string());
}

}  // namespace

CheckedFolder check_image_folder(ImageFolderSplits splits, const DataOptions& o, const std::string& dir) {
  CheckedFolder f;
  f.train.index = std::move(splits.train);
  f.val.index = std::move(splits.val);
  f.transform = o.transform;
  check_files(f, o);
  if (o.choose_transform) choose_transform(f, o, dir);
  if (f.transform.kind == ImageTransform::Kind::Plain) check_one_size(f, o);
  refuse_empty_classes(f.train);
  return f;
}

}  // namespace kiln

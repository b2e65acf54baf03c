#include "data/pack/pack_writer.h"

#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "core/file_io.h"
#include "data/image/image_codec.h"
#include "data/image/resize.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"
#include "kiln/threads.h"

namespace kiln {
namespace fs = std::filesystem;
using namespace pack_format;

std::string pack_format::shard_name(const std::string& split, int shard) {
  return fmt::format("{}-{:05d}.kpk", split, shard);
}

std::string pack_format::sources_name(const std::string& split) { return split + ".kps"; }

namespace {

using Clock = std::chrono::steady_clock;

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(p, ec));
}

// `file` as the pack's source list writes it: relative to the packed folder `root` (lexically
// normal, without a trailing '/'), with '/'; the path as given when it lies outside (a link).
std::string source_path(const std::string& file, const fs::path& root) {
  const fs::path relative = fs::path(file).lexically_normal().lexically_relative(root);
  if (relative.empty() || *relative.begin() == "..") return fs::path(file).generic_string();
  return relative.generic_string();
}

// One record as it goes into the pack, or why it cannot.
struct Encoded {
  std::vector<uint8_t> bytes;
  bool kept = false;   // the original file's bytes
  bool ready = false;  // bytes or error set
  std::exception_ptr error;
};

// The longer side scaled to max_side, the other rounded (half up), at least 1.
int scaled_side(int side, int longer, int max_side) {
  return std::max(1, int((int64_t(side) * max_side * 2 + longer) / (2 * int64_t(longer))));
}

// Every image is decoded whole, also one whose bytes are kept: a truncated or corrupt file is
// refused here, naming it, rather than met by training as a record the user cannot replace.
Encoded encode_record(const std::string& path, const PackOptions& o) {
  Encoded e;
  std::vector<uint8_t> file = read_file_bytes(path, "check that it is readable, or remove it");
  const ImageInfo info = read_image_info(file.data(), file.size(), path);
  DecodeRequest request;
  request.channels = info.stored_channels == 1 ? 1 : 3;
  DecodedImage image = decode_image(file.data(), file.size(), path, request);
  if (info.format == ImageFormat::Jpeg && std::max(info.width, info.height) <= o.max_side) {
    e.bytes = std::move(file);
    e.kept = true;
    return e;
  }
  file = {};
  const int W = image.width, H = image.height, C = image.channels;
  int w = W, h = H;
  std::vector<uint8_t> resized;
  const uint8_t* pixels = image.pixels.data();
  if (std::max(W, H) > o.max_side) {
    const int longer = std::max(W, H);
    w = W >= H ? o.max_side : scaled_side(W, longer, o.max_side);
    h = H > W ? o.max_side : scaled_side(H, longer, o.max_side);
    resized.resize(size_t(w) * size_t(h) * size_t(C));
    const ImageView view{image.pixels.data(), W, H, C, int64_t(W) * C};
    resize_box_bilinear(view, 0, 0, W, H, 0, 0, W, H, w, h, false, resized.data(), int64_t(w) * C);
    pixels = resized.data();
  }
  JpegEncodeOptions jpeg;
  jpeg.quality = o.quality;
  jpeg.exif_orientation = info.orientation != 1 ? info.orientation : 0;
  e.bytes = encode_jpeg(pixels, w, h, C, jpeg);
  return e;
}

// Records done over all splits, printed about once a second.
class Progress {
 public:
  Progress(bool on, int64_t total) : on_(on), tty_(::isatty(STDOUT_FILENO) == 1), total_(total) {}
  void add(int64_t n) { done_ += n; }
  void maybe_print(const std::string& split) {
    if (!on_) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::seconds(1)) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    fmt::print("{}kiln pack: {} / {} images ({:.1f}%, {} split), {:.0f} images/s{}", tty_ ? "\r" : "", done_, total_,
               total_ ? 100.0 * double(done_) / double(total_) : 100.0, split, double(done_) / std::max(seconds, 1e-9),
               tty_ ? "" : "\n");
    std::fflush(stdout);
    printed_ = true;
  }
  void finish() {
    if (on_ && tty_ && printed_) fmt::print("\n");
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  bool on_, tty_, printed_ = false;
  int64_t total_, done_ = 0;
  Clock::time_point start_ = Clock::now(), last_ = Clock::now();
};

// The shards of one split, written one after the other.
class ShardWriter {
 public:
  ShardWriter(fs::path dir, std::string split, int64_t limit)
      : dir_(std::move(dir)), split_(std::move(split)), limit_(limit) {}
  ~ShardWriter() {
    if (file_) std::fclose(file_);
  }
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends a record; returns its shard and offset.
  std::pair<uint32_t, uint64_t> add(const std::vector<uint8_t>& bytes) {
    if (file_ && pos_ > kShardHeaderBytes && pos_ + int64_t(bytes.size()) > limit_) close();
    if (!file_) open();
    const uint64_t offset = uint64_t(pos_);
    write(bytes.data(), bytes.size());
    return {uint32_t(names.size() - 1), offset};
  }

  void close() {
    if (!file_) return;
    std::FILE* f = file_;
    file_ = nullptr;
    const bool ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
    const int err = errno;
    if (std::fclose(f) != 0 || !ok) fail_write(ok ? errno : err);
    sizes.push_back(pos_);
  }

  std::vector<std::string> names;  // the shards' file names
  std::vector<int64_t> sizes;      // their sizes (closed ones)

 private:
  void open() {
    names.push_back(shard_name(split_, int(names.size())));
    path_ = (dir_ / names.back()).string();
    file_ = std::fopen(path_.c_str(), "wbx");
    if (!file_) fail_write(errno);
    pos_ = 0;
    uint8_t header[kShardHeaderBytes] = {};
    std::memcpy(header, kShardMagic, 4);
    store_u32(header + 4, uint32_t(kVersion));
    store_u32(header + 8, uint32_t(names.size() - 1));
    write(header, sizeof(header));
  }
  void write(const uint8_t* data, size_t size) {
    if (size && std::fwrite(data, 1, size, file_) != size) fail_write(errno);
    pos_ += int64_t(size);
  }
  [[noreturn]] void fail_write(int err) const {
    fail("cannot write pack shard '{}': {}; check the free space and permissions of its disk", path_,
         std::strerror(err));
  }

  fs::path dir_;
  std::string split_, path_;
  int64_t limit_;
  std::FILE* file_ = nullptr;
  int64_t pos_ = 0;
};

struct SplitResult {
  int64_t count = 0, kept = 0, reencoded = 0;
  std::vector<std::string> shards;
  std::vector<int64_t> shard_bytes;
  std::vector<PackSkipped> skipped;
  std::vector<int64_t> per_class;  // records packed of each label
};

// Runs `workers` threads that encode the records of `files` a bounded window ahead of the
// caller, which takes them strictly in order: the output is the same whatever the thread count,
// and the first failing record (in order) is the one the caller sees fail first.
class EncodePipeline {
 public:
  EncodePipeline(const std::vector<std::string>& files, const PackOptions& o, int workers)
      : files_(files), o_(o), window_(std::max<int64_t>(16, 4 * int64_t(workers))), slots_(size_t(window_)) {
    const int64_t n = int64_t(files.size());
    for (int t = 0; t < std::min<int64_t>(workers, n); ++t) threads_.emplace_back([this] { work(); });
  }
  ~EncodePipeline() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  EncodePipeline(const EncodePipeline&) = delete;
  EncodePipeline& operator=(const EncodePipeline&) = delete;

  // Record `j` (j = 0, 1, 2, ... in turn), calling `idle` about every 200 ms while waiting; its
  // error, when it failed, is in `error`.
  template <class Idle>
  Encoded take(int64_t j, Idle&& idle) {
    Encoded e;
    {
      std::unique_lock lock(mu_);
      Encoded& slot = slots_[size_t(j % window_)];
      while (!slot.ready) {
        if (!done_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return slot.ready; })) {
          lock.unlock();
          idle();
          lock.lock();
        }
      }
      e = std::move(slot);
      slot = Encoded{};
      ++consumed_;
    }
    work_cv_.notify_all();
    return e;
  }

 private:
  void work() {
    const int64_t n = int64_t(files_.size());
    for (;;) {
      int64_t i = 0;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || next_ >= n || next_ < consumed_ + window_; });
        if (stop_ || next_ >= n) return;
        i = next_++;
      }
      Encoded e;
      try {
        e = encode_record(files_[size_t(i)], o_);
      } catch (...) {
        e = Encoded{};
        e.error = std::current_exception();
      }
      e.ready = true;
      {
        std::lock_guard lock(mu_);
        slots_[size_t(i % window_)] = std::move(e);
      }
      done_cv_.notify_all();
    }
  }

  const std::vector<std::string>& files_;
  const PackOptions& o_;
  const int64_t window_;
  std::vector<Encoded> slots_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  int64_t next_ = 0, consumed_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

std::span<const std::byte> as_bytes(const std::vector<uint8_t>& v) {
  return std::as_bytes(std::span<const uint8_t>(v));
}

// The source list file (format in pack_writer.h) of `paths`.
std::vector<uint8_t> source_list(const std::vector<std::string>& paths) {
  size_t text = 0;
  for (const std::string& p : paths) text += p.size();
  const size_t table = size_t(kSourcesHeaderBytes) + 8 * (paths.size() + 1);
  std::vector<uint8_t> out(table + text, 0);
  std::memcpy(out.data(), kSourcesMagic, 4);
  store_u32(out.data() + 4, uint32_t(kVersion));
  store_u64(out.data() + 8, uint64_t(paths.size()));
  uint64_t offset = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    store_u64(out.data() + kSourcesHeaderBytes + 8 * i, offset);
    std::memcpy(out.data() + table + offset, paths[i].data(), paths[i].size());
    offset += paths[i].size();
  }
  store_u64(out.data() + kSourcesHeaderBytes + 8 * paths.size(), offset);
  return out;
}

// Packs the files of `index` (sources named relative to `root`) as split `split` into `dir`.
SplitResult pack_split(const ImageFolderIndex& index, const std::string& split, const fs::path& dir,
                       const fs::path& root, const PackOptions& o, Progress& progress) {
  const int64_t n = int64_t(index.files.size());
  SplitResult r;
  r.per_class.assign(index.classes.size(), 0);
  std::vector<uint8_t> entries(size_t(kIndexHeaderBytes), 0);
  entries.reserve(size_t(kIndexHeaderBytes + n * kIndexEntryBytes));
  std::vector<std::string> sources;
  ShardWriter shards(dir, split, o.shard_bytes);
  {
    EncodePipeline pipeline(index.files, o, o.workers > 0 ? o.workers : available_cores());
    for (int64_t j = 0; j < n; ++j) {
      const std::string& file = index.files[size_t(j)];
      const Encoded e = pipeline.take(j, [&] { progress.maybe_print(split); });
      progress.add(1);
      std::string bad;
      if (e.error) {
        try {
          std::rethrow_exception(e.error);
        } catch (const Error& error) {
          bad = error.what();
        }  // anything else (out of memory) is no fault of the file: it propagates
      } else if (e.bytes.size() > 0xffffffffu) {
        bad = fmt::format("image '{}' is {} bytes as a pack record, over the format's limit of 4 GiB; downscale it or "
                          "remove it", file, e.bytes.size());
      }
      if (!bad.empty()) {
        if (!o.skip_bad)
          fail("{}. (kiln pack decodes every image before packing it; --skip-bad leaves out the images it cannot "
               "decode and lists them at the end)", bad);
        r.skipped.push_back({source_path(file, root), bad});
        progress.maybe_print(split);
        continue;
      }
      const auto [shard, offset] = shards.add(e.bytes);
      uint8_t entry[kIndexEntryBytes] = {};
      const int32_t label = index.labels[size_t(j)];
      store_u32(entry, shard);
      store_u64(entry + 4, offset);
      store_u32(entry + 12, uint32_t(e.bytes.size()));
      store_u32(entry + 16, uint32_t(label));
      store_u32(entry + 20, uint32_t(crc32(0L, e.bytes.data(), uInt(e.bytes.size()))));
      entries.insert(entries.end(), entry, entry + kIndexEntryBytes);
      sources.push_back(source_path(file, root));
      (e.kept ? r.kept : r.reencoded) += 1;
      r.per_class[size_t(label)] += 1;
      progress.maybe_print(split);
    }
  }
  // Files of extensions kiln cannot decode, which the scan left out (only with skip_bad).
  for (const std::string& file : index.unsupported)
    r.skipped.push_back({source_path(file, root),
                         fmt::format("'{}' is not a JPEG or PNG file (by its extension); convert it to JPEG or PNG, "
                                     "or remove it", file)});
  shards.close();
  r.count = int64_t(sources.size());
  std::memcpy(entries.data(), kIndexMagic, 4);
  store_u32(entries.data() + 4, uint32_t(kVersion));
  store_u64(entries.data() + 8, uint64_t(r.count));
  r.shards = shards.names;
  r.shard_bytes = shards.sizes;
  write_file_atomic((dir / (split + ".kpi")).string(), {as_bytes(entries)});
  write_file_atomic((dir / sources_name(split)).string(), {as_bytes(source_list(sources))});
  return r;
}

void check_options(const PackOptions& o) {
  if (o.max_side < 1 || o.max_side > 65500)
    fail("pack max_side must be in [1, 65500] (a JPEG's largest side), got {}; use e.g. 512", o.max_side);
  if (o.quality < 1 || o.quality > 100) fail("pack JPEG quality must be in [1, 100], got {}; use e.g. 90", o.quality);
  if (o.shard_bytes < 1) fail("pack shard size must be positive, got {} bytes; use e.g. 256 MB", o.shard_bytes);
  if (o.workers < 0) fail("pack workers must be >= 0 (0: all cores), got {}", o.workers);
}

// The lines that say what --skip-bad left out, after the summary.
void print_skipped(const PackResult& result) {
  if (!result.skipped.empty()) {
    fmt::print("kiln pack: left out {} image{} that cannot be decoded (--skip-bad); replace them and pack again to "
               "include them:\n", result.skipped.size(), result.skipped.size() == 1 ? "" : "s");
    for (const PackSkipped& s : result.skipped) fmt::print("  {}: {}\n", s.source, s.reason);
  }
  for (const std::string& c : result.empty_classes)
    fmt::print("kiln pack: warning: class '{}' has no training image left; its label has no sample\n", c);
}

}  // namespace

PackResult write_pack(const std::string& source_dir, const std::string& out_dir, const PackOptions& o) {
  check_options(o);
  fs::path out = fs::path(out_dir);
  if (!out.has_filename()) out = out.parent_path();  // "packs/imagenet/" -> "packs/imagenet"
  if (out.empty()) fail("kiln pack needs an output folder name, got '{}'; use e.g. data/imagenet-pack", out_dir);
  if (path_exists(out))
    fail("the output folder '{}' already exists; kiln pack never overwrites: name a new folder, or remove this one "
         "first", out.string());
  const fs::path partial = out.string() + ".partial";
  if (path_exists(partial))
    fail("'{}' already exists (left by an interrupted kiln pack?); remove it, then run kiln pack again",
         partial.string());

  // The splits, as open_dataset reads an image folder (files of other image formats are left out
  // and listed with skip_bad, as training skips them).
  const ImageFolderSplits splits = scan_image_folder_splits(
      source_dir, "", o.skip_bad, "convert them or remove them (or pass --skip-bad to leave them out), then run "
                                  "kiln pack again");
  const ImageFolderIndex& train = splits.train;
  const ImageFolderIndex& val = splits.val;
  const bool has_val = !val.files.empty() || !val.unsupported.empty();
  fs::path root = fs::path(source_dir).lexically_normal();
  if (!root.has_filename() && root.has_parent_path()) root = root.parent_path();  // "photos/" -> "photos"

  std::error_code ec;
  if (out.has_parent_path()) fs::create_directories(out.parent_path(), ec);
  if (!fs::create_directory(partial, ec) || ec)
    fail("cannot create the folder '{}': {}; check that its parent folder is writable", partial.string(),
         ec ? ec.message() : "it already exists");
  try {
    Progress progress(o.progress, int64_t(train.files.size() + val.files.size()));
    nlohmann::json splits = nlohmann::json::object();
    PackResult result;
    int64_t kept = 0, reencoded = 0, bytes = 0, shards = 0;
    auto pack = [&](const ImageFolderIndex& index, const std::string& split) {
      const SplitResult r = pack_split(index, split, partial, root, o, progress);
      std::vector<std::string> skipped;
      for (const PackSkipped& s : r.skipped) skipped.push_back(s.source);
      splits[split] = {{"count", r.count},     {"index", split + ".kpi"},        {"shards", r.shards},
                       {"shard_bytes", r.shard_bytes}, {"sources", sources_name(split)}, {"kept", r.kept},
                       {"reencoded", r.reencoded},     {"skipped", skipped}};
      kept += r.kept, reencoded += r.reencoded, shards += int64_t(r.shards.size());
      for (int64_t b : r.shard_bytes) bytes += b;
      result.skipped.insert(result.skipped.end(), r.skipped.begin(), r.skipped.end());
      return r;
    };
    const SplitResult t = pack(train, "train");
    result.train = t.count;
    if (t.count == 0)  // skip_bad left every training image out (the scan refuses empty classes)
      fail("no training image of '{}' could be decoded ({} left out with --skip-bad, the first '{}': {}); check the "
           "files", train.root, t.skipped.size(), t.skipped.at(0).source, t.skipped.at(0).reason);
    for (size_t c = 0; c < train.classes.size(); ++c)
      if (t.per_class[c] == 0) result.empty_classes.push_back(train.classes[c]);
    if (has_val) result.val = pack(val, "val").count;
    const nlohmann::json manifest = {{"format", kFormatName},
                                     {"version", kVersion},
                                     {"classes", train.classes},
                                     {"settings", {{"max_side", o.max_side}, {"quality", o.quality}}},
                                     {"splits", splits}};
    const std::string text = manifest.dump(2) + "\n";
    write_file_atomic((partial / kManifestName).string(),
                      {std::as_bytes(std::span<const char>(text.data(), text.size()))});
    if (path_exists(out))
      fail("the output folder '{}' appeared while packing; kiln pack never overwrites: remove it or name another "
           "folder, then run kiln pack again", out.string());
    fs::rename(partial, out, ec);
    if (ec) fail("cannot rename '{}' to '{}': {}", partial.string(), out.string(), ec.message());
    progress.finish();
    if (o.progress) {
      fmt::print("kiln pack: {} images ({} training, {} validation) -> '{}': {} shard{}, {:.1f} MB, {} kept as they "
                 "were, {} re-encoded (max side {}, quality {}), in {:.1f} s\n",
                 result.train + result.val, result.train, result.val, out.string(), shards, shards == 1 ? "" : "s",
                 double(bytes) / 1e6, kept, reencoded, o.max_side, o.quality, progress.seconds());
      print_skipped(result);
    }
    return result;
  } catch (...) {
    std::error_code rm_ec;
    if (path_exists(partial)) fs::remove_all(partial, rm_ec);
    throw;
  }
}

}  // namespace kiln

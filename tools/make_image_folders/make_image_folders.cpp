// Photo-crop and digits-PNG image folders (see make_image_folders.h).
#include "make_image_folders/make_image_folders.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <thread>

#include "core/random.h"
#include "core/file_io.h"
#include "data/image/crop_geometry.h"
#include "data/image/image_codec.h"
#include "data/image/resize.h"
#include "kiln/data.h"
#include "kiln/error.h"
#include "kiln/threads.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// ---- the output folder: built in "<out>.partial", renamed to <out> when complete ----

constexpr const char* kPartialMarker = ".kiln_make_image_folders_partial";

class OutputFolder {
 public:
  explicit OutputFolder(const std::string& out) {
    out_ = fs::path(out).lexically_normal();
    if (out_.filename().empty()) out_ = out_.parent_path();  // "dir/" -> "dir"
    if (out_.empty()) fail("the output folder name is empty");
    partial_ = out_;
    partial_ += ".partial";
    check_out();
    std::error_code ec;
    if (fs::exists(fs::symlink_status(partial_))) {
      // Left by an interrupted run of this tool (it carries our marker): ours to remove.
      if (!fs::is_directory(fs::symlink_status(partial_)) || !fs::exists(partial_ / kPartialMarker))
        fail("'{}' exists and was not made by kiln_make_image_folders: it is where the output is built before "
             "it is renamed to '{}'; move it away or choose another output folder",
             partial_.string(), out_.string());
      fs::remove_all(partial_, ec);
      if (ec) fail("cannot remove '{}' (left by an interrupted run): {}", partial_.string(), ec.message());
    }
    fs::create_directories(partial_, ec);
    if (ec) fail("cannot create '{}': {}", partial_.string(), ec.message());
    write_bytes(partial_ / kPartialMarker, {});
  }
  ~OutputFolder() {
    if (!committed_) {  // an error: drop the half-built folder
      std::error_code ec;
      fs::remove_all(partial_, ec);
    }
  }
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;

  const fs::path& dir() const { return partial_; }

  void commit() {
    check_out();
    std::error_code ec;
    fs::remove(partial_ / kPartialMarker, ec);
    if (fs::exists(fs::symlink_status(out_))) fs::remove(out_, ec);  // an empty folder (checked above)
    if (ec) fail("cannot replace the empty folder '{}': {}", out_.string(), ec.message());
    fs::rename(partial_, out_, ec);
    if (ec) fail("cannot rename '{}' to '{}': {}", partial_.string(), out_.string(), ec.message());
    committed_ = true;
  }

  // Writes `bytes` to `path` through a temporary name and a rename, so no reader sees half a file.
  static void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
    const std::string target = path.string();
    const std::string temp = target + ".tmp";
    FILE* f = std::fopen(temp.c_str(), "wb");
    if (!f) fail("cannot create '{}': {}", temp, std::strerror(errno));
    const bool written = bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    const int err = errno;
    if (std::fclose(f) != 0 || !written) {
      std::remove(temp.c_str());
      fail("cannot write '{}': {}", temp, std::strerror(written ? errno : err));
    }
    if (std::rename(temp.c_str(), target.c_str()) != 0) {
      const int rename_err = errno;
      std::remove(temp.c_str());
      fail("cannot rename '{}' to '{}': {}", temp, target, std::strerror(rename_err));
    }
  }

 private:
  void check_out() const {
    std::error_code ec;
    const auto status = fs::symlink_status(out_, ec);
    if (!fs::exists(status)) return;
    if (!fs::is_directory(status) || !fs::is_empty(out_, ec) || ec)
      fail("'{}' already exists and is not an empty folder: kiln_make_image_folders never overwrites "
           "existing data; remove it or choose another output folder", out_.string());
  }

  fs::path out_, partial_;
  bool committed_ = false;
};

void make_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create '{}': {}", dir.string(), ec.message());
}

// ---- work over std::threads: items are claimed one at a time; the first error stops the rest ----

void parallel_for(int64_t n, int threads, const std::function<void(int64_t)>& body) {
  if (threads <= 0) threads = kiln::threads();
  threads = int(std::clamp<int64_t>(threads, 1, std::max<int64_t>(n, 1)));
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto worker = [&] {
    for (;;) {
      const int64_t i = next.fetch_add(1);
      if (i >= n || failed.load()) return;
      try {
        body(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        failed = true;
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

int decimal_digits(int64_t n) {
  int d = 1;
  while (n >= 10) n /= 10, ++d;
  return d;
}

// ---- finding the source photos ----

constexpr const char* kDpkgSuffix = ".dpkg-new";
constexpr int kThumbSide = 64;         // the photo-likeness tests run on a thumbnail this long
constexpr int kMaxSourceSide = 1600;   // sources are kept at most this long (crops cover >= 1/4 of the area)
constexpr int kMaxClasses = 100;
constexpr int kLineSide = 128;         // the uniform-line test runs on a decode at least this large
constexpr int kSignatureSide = 16;     // duplicates: the correlation of 16x16 luma thumbnails
constexpr float kDuplicateCorrelation = 0.95f;

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The file's name without a dpkg suffix: "lena.jpg.dpkg-new" -> "lena.jpg".
std::string logical_name(const fs::path& path) {
  std::string name = path.filename().string();
  if (ends_with(name, kDpkgSuffix)) name.resize(name.size() - std::strlen(kDpkgSuffix));
  return name;
}

// lowercase [a-z0-9_], runs of anything else as one '_', no '_' at either end.
std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : lower(s)) {
    const bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (keep)
      out += c;
    else if (!out.empty() && out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

struct Candidate {
  std::string path, logical;  // logical: the path with any dpkg suffix removed
  bool jpeg = false;
};

struct Screened {
  bool ok = false;
  int width = 0, height = 0;
  std::vector<float> signature;  // the 16x16 luma thumbnail, zero mean, unit norm
};

struct Rgb {
  std::vector<uint8_t> pixels;
  int width = 0, height = 0;
};

// The whole image resampled to out_w x out_h (antialiased bilinear).
Rgb resample(const uint8_t* pixels, int width, int height, int channels, int out_w, int out_h) {
  Rgb out;
  out.width = out_w;
  out.height = out_h;
  out.pixels.resize(size_t(out_w) * out_h * channels);
  const ImageView view{pixels, width, height, channels, int64_t(width) * channels};
  resize_box_bilinear(view, 0, 0, width, height, 0, 0, width, height, out_w, out_h, false, out.pixels.data(),
                      int64_t(out_w) * channels);
  return out;
}

// Scales (w, h) so its longer side is `side`, keeping the aspect ratio.
std::pair<int, int> fit_long_side(int w, int h, int side) {
  if (w >= h) return {side, std::max(1, int(std::lround(double(h) * side / w)))};
  return {std::max(1, int(std::lround(double(w) * side / h))), side};
}

// Whether at least 3/4 of the row's pixels lie within 4 levels of its median.
bool mostly_uniform(const uint8_t* row, int w) {
  std::vector<uint8_t> sorted(row, row + w);
  std::nth_element(sorted.begin(), sorted.begin() + w / 2, sorted.end());
  const int median = sorted[w / 2];
  const int close = int(std::count_if(row, row + w, [&](uint8_t v) { return std::abs(v - median) <= 4; }));
  return 4 * close >= 3 * w;
}

// A row or column (away from the borders) whose luma varies by at most 6 levels along the whole
// image (the separator of side-by-side panels, a window's edge), or a near-uniform row at the top (a
// window's title bar). Photos have none.
bool has_uniform_line(const DecodedImage& image) {
  const int w = image.width, h = image.height;
  std::vector<uint8_t> luma(size_t(w) * h);
  for (size_t i = 0; i < luma.size(); ++i)
    luma[i] = luma_of(image.pixels[3 * i], image.pixels[3 * i + 1], image.pixels[3 * i + 2]);
  std::vector<uint8_t> col_min(w, 255), col_max(w, 0);
  for (int y = 0; y < h; ++y) {
    const uint8_t* row = &luma[size_t(y) * w];
    const auto [lo, hi] = std::minmax_element(row, row + w);
    if (y >= h / 20 && y < h - h / 20 && *hi - *lo <= 6) return true;
    if (y < h / 10 && mostly_uniform(row, w)) return true;  // a window's title bar
    for (int x = 0; x < w; ++x) col_min[x] = std::min(col_min[x], row[x]), col_max[x] = std::max(col_max[x], row[x]);
  }
  for (int x = w / 20; x < w - w / 20; ++x)
    if (col_max[x] - col_min[x] <= 6) return true;
  return false;
}

// Whether the file looks like a photograph, and its signature (for duplicates). Diagrams, plots,
// screenshots and side-by-side result panels have flat areas, few grey levels, one dominant colour, or
// straight uniform lines across the whole image (separators, window borders); photos have none of these.
Screened screen(const Candidate& c, int min_side) {
  Screened result;
  try {
    const std::vector<uint8_t> bytes = read_file_bytes(c.path, "");
    const ImageInfo info = read_image_info(bytes.data(), bytes.size(), c.path);
    if (std::min(info.width, info.height) < min_side) return result;
    DecodeRequest request;
    request.channels = 3;
    request.min_width = request.min_height = kLineSide;  // JPEGs: DCT-scaled, a fraction of a full decode
    const DecodedImage image = decode_image(bytes.data(), bytes.size(), c.path, request);
    if (has_uniform_line(image)) return result;
    auto [tw, th] = fit_long_side(image.width, image.height, kThumbSide);
    const Rgb thumb = resample(image.pixels.data(), image.width, image.height, 3, tw, th);
    const size_t n = size_t(tw) * th;
    // Luma spread, distinct levels, the commonest (6-bit) colour's share.
    std::vector<uint8_t> luma(n);
    double sum = 0, sum2 = 0;
    std::vector<int> levels(256, 0);
    std::map<uint32_t, int> colours;
    int top = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* p = &thumb.pixels[3 * i];
      luma[i] = luma_of(p[0], p[1], p[2]);
      sum += luma[i];
      sum2 += double(luma[i]) * luma[i];
      ++levels[luma[i]];
      const uint32_t key = uint32_t(p[0] >> 2) << 12 | uint32_t(p[1] >> 2) << 6 | uint32_t(p[2] >> 2);
      top = std::max(top, ++colours[key]);
    }
    const double mean = sum / double(n);
    const double stddev = std::sqrt(std::max(0.0, sum2 / double(n) - mean * mean));
    const int distinct = int(std::count_if(levels.begin(), levels.end(), [](int k) { return k > 0; }));
    // Flat: a pixel whose four neighbours are within 2 levels of it in every channel.
    auto near = [&](int x, int y, int dx, int dy) {
      const uint8_t* p = &thumb.pixels[3 * (size_t(y) * tw + x)];
      const uint8_t* q = &thumb.pixels[3 * (size_t(y + dy) * tw + x + dx)];
      return std::abs(p[0] - q[0]) <= 2 && std::abs(p[1] - q[1]) <= 2 && std::abs(p[2] - q[2]) <= 2;
    };
    int flat = 0;
    for (int y = 1; y + 1 < th; ++y)
      for (int x = 1; x + 1 < tw; ++x)
        flat += near(x, y, -1, 0) && near(x, y, 1, 0) && near(x, y, 0, -1) && near(x, y, 0, 1);
    const double flat_share = double(flat) / double(std::max(1, (tw - 2) * (th - 2)));
    if (stddev < 20 || distinct < 64 || double(top) > 0.2 * double(n) || flat_share > 0.15) return result;
    // Signature: the 16x16 luma thumbnail, zero mean, unit norm.
    const Rgb tiny = resample(luma.data(), tw, th, 1, kSignatureSide, kSignatureSide);
    result.signature.assign(tiny.pixels.begin(), tiny.pixels.end());
    const float tiny_mean = std::accumulate(result.signature.begin(), result.signature.end(), 0.0f) /
                            float(result.signature.size());
    float norm = 0;
    for (float& v : result.signature) v -= tiny_mean, norm += v * v;
    if (norm <= 0) return result;
    for (float& v : result.signature) v /= std::sqrt(norm);
    result.ok = true;
    result.width = info.width;
    result.height = info.height;
  } catch (const Error&) {
    // unreadable or not an image: not a source
  }
  return result;
}

// The name's family: the sanitized stem without trailing digits and separators, in its folder
// ("left01.jpg", "left14.jpg" -> "<dir>/left"): numbered series are shots of one scene.
std::string family_of(const fs::path& logical) {
  std::string stem = sanitize(logical.stem().string());
  while (!stem.empty() && (std::isdigit(static_cast<unsigned char>(stem.back())) || stem.back() == '_'))
    stem.pop_back();
  return logical.parent_path().string() + "/" + stem;
}

// ---- the samples ----

enum Special { kPlain = 0, kGray, kProgressive, kCmyk, kExif, kSpecialKinds };
constexpr uint64_t kSampleStream[2] = {0x7472'61696e'0001ULL, 0x0076'616c'0001ULL};   // train, val
constexpr uint64_t kSpecialStream[2] = {0x7472'61696e'0002ULL, 0x0076'616c'0002ULL};

// Which special kind (if any) sample g of a split is: each block of `block` samples has one of each
// kind, at positions drawn per block.
int special_kind(uint64_t seed, int split, int64_t g, int block) {
  const int64_t b = g / block;
  const int pos = int(g % block);
  SplitRng rng(random_bits(seed, kSpecialStream[split], uint64_t(b)));
  std::vector<int> order(block);
  std::iota(order.begin(), order.end(), 0);
  for (int k = 0; k + 1 < kSpecialKinds; ++k) {
    std::swap(order[k], order[k + int(rng.below(uint64_t(block - k)))]);
    if (order[k] == pos) return k + 1;
  }
  return kPlain;
}

double standard_normal(SplitRng& rng) {
  const double u1 = 1.0 - rng.uniform();  // (0, 1]
  const double u2 = rng.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// One sample: a random crop of `src` at ImageNet-like size, as JPEG bytes.
std::vector<uint8_t> make_sample(const Rgb& src, const PhotoFolderOptions& o, int split, int64_t g) {
  SplitRng rng(random_bits(o.seed, kSampleStream[split], uint64_t(g)));
  // Longer side: ImageNet's most common 500 about half the time, else spread around it (200..800).
  double side = 500;
  const double spread = 500 * std::exp(0.3 * standard_normal(rng));
  if (rng.uniform() >= 0.5) side = std::clamp(spread, 200.0, 800.0);
  const int long_side = std::max(1, int(std::lround(std::min<double>(side, o.max_side))));
  // Aspect (width / height): mostly 4:3 landscape, some 3:4 portrait, a few square, else in between
  // (about 70% landscape, 25% portrait, as in ImageNet).
  const double u = rng.uniform();
  const double log_aspect = rng.uniform(std::log(3.0 / 4.0), std::log(4.0 / 3.0));
  const double aspect = u < 0.6 ? 4.0 / 3.0 : u < 0.72 ? 3.0 / 4.0 : u < 0.76 ? 1.0 : std::exp(log_aspect);
  int out_w = long_side, out_h = long_side;
  if (aspect >= 1)
    out_h = std::max(1, int(std::lround(long_side / aspect)));
  else
    out_w = std::max(1, int(std::lround(long_side * aspect)));
  // The crop: 25-100% of the photo's area at that aspect (RandomResizedCrop's sampler).
  const CropBox box = random_resized_crop_box(src.width, src.height, {0.25, 1.0, aspect, aspect}, rng.next());
  const bool flip = rng.next() & 1;
  JpegEncodeOptions jpeg;
  jpeg.quality = 75 + int(rng.below(21));
  jpeg.subsample_420 = rng.uniform() >= 0.2;
  const bool ycck = rng.next() & 1;
  const int orientation = 2 + int(rng.below(7));

  std::vector<uint8_t> pixels(size_t(out_w) * out_h * 3);
  const ImageView view{src.pixels.data(), src.width, src.height, 3, int64_t(src.width) * 3};
  resize_box_bilinear(view, box.x, box.y, box.width, box.height, box.x, box.y, box.x + box.width,
                      box.y + box.height, out_w, out_h, flip, pixels.data(), int64_t(out_w) * 3);
  switch (special_kind(o.seed, split, g, o.special_block)) {
    case kGray: {
      std::vector<uint8_t> gray(size_t(out_w) * out_h);
      for (size_t i = 0; i < gray.size(); ++i) gray[i] = luma_of(pixels[3 * i], pixels[3 * i + 1], pixels[3 * i + 2]);
      return encode_jpeg(gray.data(), out_w, out_h, 1, jpeg);
    }
    case kProgressive: jpeg.progressive = true; break;
    case kCmyk:
      jpeg.cmyk = true;
      jpeg.ycck = ycck;
      break;
    case kExif: jpeg.exif_orientation = orientation; break;
    default: break;
  }
  return encode_jpeg(pixels.data(), out_w, out_h, 3, jpeg);
}

void check_options(const PhotoFolderOptions& o) {
  if (o.classes < 0) fail("--classes must be >= 0 (0: every qualifying photo, at most {}), got {}", kMaxClasses, o.classes);
  if (o.train_per_class < 1) fail("--train-per-class must be >= 1, got {}", o.train_per_class);
  if (o.val_per_class < 0) fail("--val-per-class must be >= 0, got {}", o.val_per_class);
  if (o.max_side < 16 || o.max_side > 4096) fail("--max-side must be in 16..4096, got {}", o.max_side);
  if (o.min_source_side < 16) fail("the minimum source side must be >= 16, got {}", o.min_source_side);
  if (o.special_block < kSpecialKinds - 1)
    fail("special_block must be >= {} (one file of each special kind per block), got {}", kSpecialKinds - 1,
         o.special_block);
}

// find_source_photos, stopping once `limit` photos qualify (the same first `limit` as a full search:
// candidates are screened in order, a chunk at a time).
std::vector<SourcePhoto> find_sources(const PhotoFolderOptions& options, size_t limit) {
  std::error_code ec;
  if (!fs::is_directory(options.source, ec))
    fail("source folder '{}' does not exist{}", options.source,
         options.source == kOpencvDocDir ? ": install it with `apt-get install opencv-doc`, or pass --source DIR"
                                         : "");
  // Every .jpg/.jpeg/.png, also as *.dpkg-new (one of the two when both exist).
  std::map<std::string, Candidate> found;  // by logical path: sorted, unique
  for (auto it = fs::recursive_directory_iterator(options.source, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string logical = logical_name(it->path());
    const std::string ext = lower(fs::path(logical).extension().string());
    if (ext != ".jpg" && ext != ".jpeg" && ext != ".png") continue;
    Candidate c{it->path().string(), (it->path().parent_path() / logical).string(), ext != ".png"};
    auto [pos, inserted] = found.emplace(c.logical, c);
    if (!inserted && !ends_with(c.path, kDpkgSuffix)) pos->second = c;  // prefer the installed name
  }
  if (ec) fail("cannot list source folder '{}': {}", options.source, ec.message());
  std::vector<Candidate> candidates;
  for (auto& [_, c] : found) candidates.push_back(c);
  // JPEGs (photographs, mostly) first, then PNGs; by path within each.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) { return a.jpeg > b.jpeg; });

  std::vector<Screened> screened(candidates.size());
  constexpr size_t kChunk = 64;
  std::vector<SourcePhoto> photos;
  std::vector<const std::vector<float>*> kept;
  std::set<std::string> names, families;
  for (size_t i = 0; i < candidates.size() && photos.size() < limit; ++i) {
    if (i % kChunk == 0) {
      const size_t n = std::min(kChunk, candidates.size() - i);
      parallel_for(int64_t(n), options.threads,
                   [&](int64_t k) { screened[i + k] = screen(candidates[i + k], options.min_source_side); });
    }
    const Screened& s = screened[i];
    if (!s.ok) continue;
    // One photo per numbered series, and none that copies an earlier one (another scale or crop).
    if (!families.insert(family_of(candidates[i].logical)).second) continue;
    const bool duplicate = std::any_of(kept.begin(), kept.end(), [&](const std::vector<float>* other) {
      return std::inner_product(other->begin(), other->end(), s.signature.begin(), 0.0f) > kDuplicateCorrelation;
    });
    if (duplicate) continue;
    kept.push_back(&s.signature);
    const fs::path logical(candidates[i].logical);
    std::string name = sanitize(logical.stem().string());
    if (name.empty()) name = "photo";
    if (names.count(name)) {
      const std::string parent = sanitize(logical.parent_path().filename().string());
      if (!parent.empty()) name = parent + "_" + name;
    }
    const std::string base = name;
    for (int k = 2; names.count(name); ++k) name = base + "_" + std::to_string(k);
    names.insert(name);
    photos.push_back({candidates[i].path, name, s.width, s.height});
  }
  return photos;
}

}  // namespace

std::vector<SourcePhoto> find_source_photos(const PhotoFolderOptions& options) {
  return find_sources(options, std::numeric_limits<size_t>::max());
}

void make_photo_folder(const PhotoFolderOptions& options, const std::string& out_dir) {
  check_options(options);
  OutputFolder out(out_dir);  // refuses an existing non-empty folder before any work
  std::vector<SourcePhoto> photos = find_sources(options, options.classes > 0 ? options.classes : kMaxClasses);
  const std::string rule = fmt::format("JPEG/PNG, shorter side >= {}, photo-like, no near duplicates",
                                       options.min_source_side);
  if (photos.empty()) fail("no source photo under '{}' qualifies ({}); pass --source DIR", options.source, rule);
  if (int(photos.size()) < options.classes)
    fail("--classes {} needs that many source photos, but only {} under '{}' qualify ({})", options.classes,
         photos.size(), options.source, rule);
  const int wanted = int(photos.size());
  if (options.verbose)
    std::printf("using %d source photos as classes; decoding them\n", wanted), std::fflush(stdout);

  std::vector<Rgb> sources(photos.size());
  parallel_for(int64_t(photos.size()), options.threads, [&](int64_t i) {
    const std::vector<uint8_t> bytes = read_file_bytes(photos[i].path, "");
    DecodedImage image = decode_image(bytes.data(), bytes.size(), photos[i].path);
    if (std::max(image.width, image.height) > kMaxSourceSide) {
      auto [w, h] = fit_long_side(image.width, image.height, kMaxSourceSide);
      sources[i] = resample(image.pixels.data(), image.width, image.height, 3, w, h);
    } else {
      sources[i] = Rgb{std::move(image.pixels), image.width, image.height};
    }
  });

  const char* split_names[2] = {"train", "val"};
  const int per_class[2] = {options.train_per_class, options.val_per_class};
  for (int split = 0; split < 2; ++split)  // no val/ at all for --val-per-class 0 (no empty class folders)
    if (per_class[split] > 0)
      for (const SourcePhoto& p : photos) make_dir(out.dir() / split_names[split] / p.class_name);
  const int64_t train_count = int64_t(wanted) * per_class[0];
  const int64_t total = train_count + int64_t(wanted) * per_class[1];
  if (options.verbose) std::printf("writing %lld JPEGs\n", (long long)total), std::fflush(stdout);
  parallel_for(total, options.threads, [&](int64_t t) {
    const int split = t < train_count ? 0 : 1;
    const int64_t g = split == 0 ? t : t - train_count;  // index within the split
    const int64_t c = g / per_class[split], j = g % per_class[split];
    const std::vector<uint8_t> jpeg = make_sample(sources[c], options, split, g);
    const std::string name = fmt::format("{:0{}d}.jpg", j, std::max(4, decimal_digits(per_class[split] - 1)));
    OutputFolder::write_bytes(out.dir() / split_names[split] / photos[c].class_name / name, jpeg);
  });
  out.commit();
}

void make_digits_png_folder(const std::string& idx_dir, const std::string& out_dir, int threads) {
  OutputFolder out(out_dir);
  const char* split_names[2] = {"train", "val"};
  for (int split = 0; split < 2; ++split) {
    const Dataset ds = load_dataset(idx_dir, "idx", split == 0);
    if (ds.channels != 1) fail("'{}' holds {}-channel images; expected grayscale IDX", idx_dir, ds.channels);
    const int label_width = decimal_digits(std::max(ds.num_classes - 1, 0));
    const int index_width = std::max(4, decimal_digits(std::max<int64_t>(ds.count - 1, 0)));
    auto class_dir = [&](int32_t label) {
      return out.dir() / split_names[split] / fmt::format("{:0{}d}", label, label_width);
    };
    // A folder per label that occurs (an image folder's class folders may not be empty).
    std::set<int32_t> labels;
    for (int64_t i = 0; i < ds.count; ++i) {
      const int32_t label = ds.labels[i];
      if (label < 0 || label >= ds.num_classes)
        fail("'{}': sample {} of the {} split has label {}, outside 0..{}", idx_dir, i, split_names[split], label,
             ds.num_classes - 1);
      if (labels.insert(label).second) make_dir(class_dir(label));
    }
    parallel_for(ds.count, threads, [&](int64_t i) {
      const int32_t label = ds.labels[i];
      const std::vector<uint8_t> png =
          encode_png(ds.images.data() + i * ds.image_size(), int(ds.width), int(ds.height), 1);
      OutputFolder::write_bytes(class_dir(label) / fmt::format("{:0{}d}.png", i, index_width), png);
    });
  }
  out.commit();
}

}  // namespace kiln

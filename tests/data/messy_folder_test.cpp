// Image folders as users leave them (kiln/image_folder.h, src/data/image_folder/): links that loop,
// files and folders reached by two paths, dangling links, a validation file that is a training
// file, truncated files (found before the first batch, in agreement with the decoder) and small
// images, for which --transform auto takes them at their own size.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <random>

#include "data/image/image_codec.h"
#include "data/image_folder/file_check.h"
#include "kiln/data.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"
#include "support/test_pictures.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::write_bytes;

std::vector<uint8_t> jpeg_bytes(int w, int h, uint32_t seed, JpegEncodeOptions o = {}) {
  const std::vector<uint8_t> p = testing::picture(w, h, 3, seed);
  return encode_jpeg(p.data(), w, h, 3, o);
}

std::vector<uint8_t> png_bytes(int w, int h, int c, uint32_t seed, PngEncodeOptions o = {}) {
  const std::vector<uint8_t> p = testing::picture(w, h, c, seed);
  return encode_png(p.data(), w, h, c, o);
}

// Noise compresses badly: files past the check's head and tail (file_check.h), so that it reads
// them in two pieces.
std::vector<uint8_t> noise(int w, int h, int c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> p(size_t(w) * h * c);
  for (uint8_t& v : p) v = uint8_t(rng());
  return p;
}

void put(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  write_bytes(path.string(), bytes);
}

void put_jpeg(const fs::path& path, int w = 24, int h = 20, uint32_t seed = 1) { put(path, jpeg_bytes(w, h, seed)); }

std::vector<std::string> names_under(const ImageFolderIndex& index, const fs::path& root) {
  std::vector<std::string> out;
  for (const std::string& f : index.files) out.push_back(f.substr(root.string().size() + 1));  // links kept
  return out;
}

// ---- the walk: loops, links, paths reached twice ----

TEST(MessyFolders, ALinkBackUpIsALoopNamedWithItsTarget) {
  TempDir dir;
  const fs::path root = dir.path() / "train";
  put_jpeg(root / "cat" / "1.jpg");
  put_jpeg(root / "fish" / "1.jpg");
  fs::create_directory_symlink("..", root / "fish" / "loop");
  testing::expect_error([&] { scan_image_folder(root.string()); },
                        {"image folder loop", (root / "fish" / "loop").string(), "a link to '..'", root.string(),
                         "remove the link"});
}

// Two loops make os.walk branch at every level (it follows each until the path is too long): the
// scan stops at the first, at once, whatever the disk lists first.
TEST(MessyFolders, TwoLoopsAreRefusedAtOnce) {
  TempDir dir;
  const fs::path root = dir.path() / "data" / "train";
  for (const char* cls : {"baboon", "fish"}) put_jpeg(root / cls / "1.jpg");
  put_jpeg(dir.path() / "data" / "val" / "baboon" / "1.jpg");
  fs::create_directory_symlink("../..", root / "baboon" / "up");
  fs::create_directory_symlink("..", root / "fish" / "loop");
  const auto start = std::chrono::steady_clock::now();
  testing::expect_error([&] { scan_image_folder_splits((dir.path() / "data").string(), "", false, ""); },
                        {(root / "baboon" / "up").string(), "'../..'"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// Links that point at each other: each alone is no loop, together they are.
TEST(MessyFolders, LinksPointingAtEachOtherAreALoop) {
  TempDir dir;
  const fs::path cls = dir.path() / "set" / "cat";
  put_jpeg(cls / "a" / "1.jpg");
  put_jpeg(cls / "b" / "2.jpg");
  fs::create_directory_symlink("../b", cls / "a" / "x");
  fs::create_directory_symlink("../a", cls / "b" / "y");
  testing::expect_error([&] { scan_image_folder((dir.path() / "set").string()); },
                        {"image folder loop", (cls / "a" / "x" / "y").string(), "'../a'"});
}

// A class folder that is a link to the folder holding it.
TEST(MessyFolders, AClassFolderLinkedToItsParentIsALoop) {
  TempDir dir;
  put_jpeg(dir.path() / "set" / "cat" / "1.jpg");
  fs::create_directory_symlink(".", dir.path() / "set" / "dog");
  testing::expect_error([&] { scan_image_folder((dir.path() / "set").string()); },
                        {"image folder loop", (dir.path() / "set" / "dog").string()});
}

// Links to files and folders elsewhere are followed once, named by their link's path, in
// torchvision's order (sorted(os.walk(followlinks=True)), then sorted names).
TEST(MessyFolders, LinksToFilesAndFoldersAreFollowedOnceInTorchvisionOrder) {
  TempDir dir;
  const fs::path pool = dir.path() / "pool", root = dir.path() / "set";
  put_jpeg(pool / "p1.jpg");
  put_jpeg(pool / "sub" / "p2.jpg");
  put(dir.path() / "single.png", png_bytes(8, 8, 1, 3));
  put_jpeg(dir.path() / "dogs" / "d.jpg");
  put_jpeg(root / "cat" / "a.jpg");
  fs::create_directory_symlink(pool, root / "cat" / "zlink");
  fs::create_symlink(dir.path() / "single.png", root / "cat" / "b.png");
  fs::create_directory_symlink(dir.path() / "dogs", root / "dog");
  const ImageFolderIndex index = scan_image_folder(root.string());
  EXPECT_EQ(index.classes, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(names_under(index, root), (std::vector<std::string>{"cat/a.jpg", "cat/b.png", "cat/zlink/p1.jpg",
                                                                "cat/zlink/sub/p2.jpg",
                                                                "dog/d.jpg"}));
}

TEST(MessyFolders, AFileReachedByTwoPathsIsNamedWithBoth) {
  TempDir dir;
  const fs::path root = dir.path() / "set";
  put_jpeg(root / "cat" / "a.jpg");
  put_jpeg(root / "dog" / "d.jpg");
  fs::create_symlink("a.jpg", root / "cat" / "again.jpg");
  testing::expect_error([&] { scan_image_folder(root.string()); },
                        {"reaches 1 image file by two paths",
                         fmt::format("'{}' is the same file as '{}'", (root / "cat" / "again.jpg").string(),
                                     (root / "cat" / "a.jpg").string()),
                         fmt::format("the link '{}' -> 'a.jpg'", (root / "cat" / "again.jpg").string()), "copy it"});
  // A hard link in another class: two labels for one image.
  fs::remove(root / "cat" / "again.jpg");
  fs::create_hard_link(root / "cat" / "a.jpg", root / "dog" / "a.jpg");
  testing::expect_error([&] { scan_image_folder(root.string()); },
                        {fmt::format("'{}' is the same file as '{}'", (root / "dog" / "a.jpg").string(),
                                     (root / "cat" / "a.jpg").string()),
                         "class of its path"});
}

TEST(MessyFolders, AFolderReachedTwiceIsNamedUnlessItHoldsNoImages) {
  TempDir dir;
  const fs::path root = dir.path() / "set";
  put_jpeg(root / "cat" / "x" / "1.jpg");
  put_jpeg(root / "cat" / "x" / "2.jpg");
  fs::create_directories(root / "cat" / "empty");
  fs::create_directory_symlink("empty", root / "cat" / "empty2");
  EXPECT_EQ(scan_image_folder(root.string()).files.size(), 2u);  // a folder without images counts for nothing
  fs::create_directory_symlink("x", root / "cat" / "y");
  testing::expect_error([&] { scan_image_folder(root.string()); },
                        {fmt::format("'{}' is the folder '{}' again", (root / "cat" / "y").string(),
                                     (root / "cat" / "x").string()),
                         "2 images would count twice", "remove the extra link"});
}

TEST(MessyFolders, AValidationFileThatIsATrainingFileIsNamed) {
  TempDir dir;
  const fs::path data = dir.path() / "data";
  put_jpeg(data / "train" / "cat" / "1.jpg");
  put_jpeg(data / "train" / "cat" / "2.jpg");
  put_jpeg(data / "val" / "cat" / "3.jpg");
  fs::create_symlink("../../train/cat/1.jpg", data / "val" / "cat" / "1.jpg");
  testing::expect_error([&] { scan_image_folder_splits(data.string(), "", false, ""); },
                        {"validation folder", "shares 1 image file with the training folder",
                         (data / "val" / "cat" / "1.jpg").string(), (data / "train" / "cat" / "1.jpg").string()});
  // The training folder evaluated as itself is asked for.
  const ImageFolderSplits same = scan_image_folder_splits(data.string(), (data / "train").string(), false, "");
  EXPECT_EQ(same.val.files, same.train.files);
}

// ---- the check of every file, before the first batch ----

DataOptions small_crops() {
  DataOptions o;
  o.transform.size = 16;
  o.transform.eval_resize = 18;
  return o;
}

TEST(MessyFolders, ADanglingLinkIsNamedBeforeTheFirstBatchOrLeftOut) {
  TempDir dir;
  const fs::path root = dir.path() / "set";
  put_jpeg(root / "cat" / "1.jpg");
  put_jpeg(root / "cat" / "2.jpg");
  fs::create_symlink("nowhere.jpg", root / "cat" / "gone.jpg");
  fs::create_symlink("self.jpg", root / "cat" / "self.jpg");
  fs::create_symlink("nowhere", root / "cat" / "notes");  // not an image name: ignored, as torchvision does
  EXPECT_EQ(scan_image_folder(root.string()).files.size(), 4u);
  DataOptions o = small_crops();
  testing::expect_error([&] { open_dataset(root.string(), o); },
                        {"2 of the 4 image files cannot be used, found before the first batch",
                         fmt::format("'{}' is a link to 'nowhere.jpg', which does not exist",
                                     (root / "cat" / "gone.jpg").string()),
                         "leads back to itself", "--skip-bad"});
  o.skip_bad = true;
  std::vector<std::string> notes;
  o.note = [&](const std::string& s) { notes.push_back(s); };
  const DataSplits s = open_dataset(root.string(), o);
  EXPECT_EQ(s.train->count(), 2);
  ASSERT_EQ(s.train->skipped().size(), 2u);
  EXPECT_NE(s.train->skipped()[0].find("gone.jpg"), std::string::npos);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("--skip-bad: left out 2 of the 4 image files"), std::string::npos) << notes[0];
}

TEST(MessyFolders, ATruncatedValidationFileIsRefusedBeforeTheFirstBatchOrLeftOut) {
  TempDir dir;
  const fs::path data = dir.path() / "data";
  for (int i = 0; i < 3; ++i) put_jpeg(data / "train" / "cat" / fmt::format("{}.jpg", i), 24, 20, i);
  put_jpeg(data / "val" / "cat" / "good.jpg");
  std::vector<uint8_t> cut = jpeg_bytes(24, 20, 9);
  cut.resize(cut.size() * 2 / 3);
  put(data / "val" / "cat" / "cut.jpg", cut);
  DataOptions o = small_crops();
  testing::expect_error([&] { open_dataset(data.string(), o); },
                        {"1 of the 5 image files cannot be used, found before the first batch",
                         fmt::format("truncated or corrupt JPEG '{}'", (data / "val" / "cat" / "cut.jpg").string()),
                         "Premature end of JPEG file", "re-encode or remove it, or pass --skip-bad to leave it out"});
  o.skip_bad = true;
  const DataSplits s = open_dataset(data.string(), o);
  EXPECT_EQ(s.train->count(), 3);
  EXPECT_EQ(s.test->count(), 1);
  ASSERT_EQ(s.test->skipped().size(), 1u);
  EXPECT_NE(s.test->skipped()[0].find("cut.jpg"), std::string::npos);
  EXPECT_TRUE(s.train->skipped().empty());
}

TEST(MessyFolders, AClassWhoseEveryFileIsLeftOutIsRefused) {
  TempDir dir;
  const fs::path root = dir.path() / "set";
  put_jpeg(root / "cat" / "1.jpg");
  put(root / "dog" / "1.jpg", {'n', 'o'});
  DataOptions o = small_crops();
  o.skip_bad = true;
  testing::expect_error([&] { open_dataset(root.string(), o); },
                        {fmt::format("class folder '{}' has no image left", (root / "dog").string()), "--skip-bad"});
}

// kiln eval of one split spares the other's files.
TEST(MessyFolders, ASplitNotCheckedIsNotRead) {
  TempDir dir;
  const fs::path data = dir.path() / "data";
  put_jpeg(data / "train" / "cat" / "1.jpg");
  put(data / "train" / "cat" / "bad.jpg", {'x'});
  put_jpeg(data / "val" / "cat" / "1.jpg");
  DataOptions o = small_crops();
  o.check_train_files = false;
  EXPECT_EQ(open_dataset(data.string(), o).test->count(), 1);
}

// The check refuses a file only when the decoder refuses it (a whole decode: the training crops'
// region decodes refuse a truncated file too, image_codec.h). Every file of the folders setup
// makes passes, with the size the decoder gives.
TEST(ImageFileCheck, EveryFileTheDecoderReadsPassesWithItsSize) {
  const fs::path data = fs::path(KILN_SOURCE_DIR) / "data";
  size_t files = 0;
  for (const char* folder : {"photos_tiny", "digits_png"}) {
    if (!fs::is_directory(data / folder)) GTEST_SKIP() << data / folder << " is missing: run scripts/setup.sh";
    for (const auto& e : fs::recursive_directory_iterator(data / folder)) {
      if (!e.is_regular_file()) continue;
      const std::vector<uint8_t> bytes = testing::read_bytes(e.path().string());
      const DecodedImage image = decode_image(bytes.data(), bytes.size(), e.path().string());
      const ImageFileCheck c = check_image_file(e.path().string());
      ASSERT_TRUE(c.ok()) << c.error;
      EXPECT_EQ(c.width, image.width) << e.path();
      EXPECT_EQ(c.height, image.height) << e.path();
      ++files;
    }
  }
  EXPECT_EQ(files, 300u + 5000u);
}

// A file cut anywhere is refused exactly when the decoder refuses it, small files (read whole) and
// large ones (head and tail) alike, JPEG (baseline, progressive, gray, EXIF) and PNG (plain,
// interlaced, palette, 16-bit).
TEST(ImageFileCheck, ACutFileIsRefusedExactlyWhenTheDecoderRefusesIt) {
  TempDir dir;
  JpegEncodeOptions progressive, exif, big;
  progressive.progressive = true;
  exif.exif_orientation = 6;
  big.quality = 98, big.subsample_420 = false;
  JpegEncodeOptions big_progressive = big;
  big_progressive.progressive = true;
  PngEncodeOptions interlaced, deep, palette;
  interlaced.interlaced = true;
  deep.sixteen_bit = true;
  palette.palette = true;
  const std::vector<uint8_t> large = noise(160, 120, 3, 4), gray = testing::picture(40, 30, 1, 5);
  std::vector<uint8_t> few_colours = testing::picture(30, 20, 3, 6);
  for (uint8_t& v : few_colours) v &= 0xc0;
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> files = {
      {"small.jpg", jpeg_bytes(40, 30, 1)},
      {"progressive.jpg", jpeg_bytes(40, 30, 2, progressive)},
      {"exif.jpg", jpeg_bytes(40, 30, 3, exif)},
      {"gray.jpg", encode_jpeg(gray.data(), 40, 30, 1)},
      {"large.jpg", encode_jpeg(large.data(), 160, 120, 3, big)},
      {"large_progressive.jpg", encode_jpeg(large.data(), 160, 120, 3, big_progressive)},
      {"small.png", png_bytes(30, 20, 3, 7)},
      {"interlaced.png", png_bytes(30, 20, 3, 8, interlaced)},
      {"deep.png", png_bytes(30, 20, 3, 9, deep)},
      {"palette.png", encode_png(few_colours.data(), 30, 20, 3, palette)},
      {"large.png", encode_png(large.data(), 160, 120, 3)},
  };
  size_t refused = 0, cuts = 0;
  for (const auto& [name, bytes] : files) {
    put(dir.path() / name, bytes);
    ASSERT_TRUE(check_image_file(dir.file(name)).ok()) << name;
    if (name.rfind("large", 0) == 0) {
      EXPECT_GT(bytes.size(), kHeadBytes + kTailBytes) << name;
    }
    std::vector<size_t> at = {1, 2, 10, 100, bytes.size() - 12, bytes.size() - 2, bytes.size() - 1};
    for (int k = 1; k < 16; ++k) at.push_back(bytes.size() * k / 16);
    for (size_t size : at) {
      if (size == 0 || size >= bytes.size()) continue;
      const std::string path = (dir.path() / ("cut_" + name)).string();
      put(path, std::vector<uint8_t>(bytes.begin(), bytes.begin() + long(size)));
      bool decodes = true;
      try {
        decode_image(bytes.data(), size, path);
      } catch (const Error&) {
        decodes = false;
      }
      const ImageFileCheck c = check_image_file(path);
      EXPECT_EQ(c.ok(), decodes) << name << " cut to " << size << " of " << bytes.size() << " bytes: " << c.error;
      ++cuts;
      refused += !c.ok();
      if (size <= bytes.size() / 2) {
        EXPECT_FALSE(c.ok()) << name << " cut to " << size;  // half a file never passes
      }
    }
  }
  EXPECT_GT(refused, cuts * 3 / 4);  // the few that pass lost only what follows the pixels (PNG's IEND)
}

TEST(ImageFileCheck, BytesAfterTheEndAndLongHeadersPass) {
  TempDir dir;
  const std::vector<uint8_t> large = noise(160, 120, 3, 11);
  JpegEncodeOptions big;
  big.quality = 98;
  std::vector<uint8_t> jpeg = encode_jpeg(large.data(), 160, 120, 3, big);
  // Trailing bytes without an end marker (cameras append data): the decoder stops at EOI.
  std::vector<uint8_t> trailed = jpeg;
  trailed.insert(trailed.end(), 9000, 0x11);
  put(dir.path() / "trailed.jpg", trailed);
  EXPECT_TRUE(check_image_file(dir.file("trailed.jpg")).ok()) << check_image_file(dir.file("trailed.jpg")).error;
  std::vector<uint8_t> png = png_bytes(30, 20, 3, 12);
  png.insert(png.end(), 9000, 0x22);
  put(dir.path() / "trailed.png", png);
  EXPECT_TRUE(check_image_file(dir.file("trailed.png")).ok());
  // A header longer than the check's head: a 60 KB APP2 segment after SOI.
  std::vector<uint8_t> long_header = {0xff, 0xd8, 0xff, 0xe2, 0xea, 0x62};  // length 60002
  long_header.resize(long_header.size() + 60000, 0x33);
  long_header.insert(long_header.end(), jpeg.begin() + 2, jpeg.end());
  put(dir.path() / "long_header.jpg", long_header);
  const ImageFileCheck c = check_image_file(dir.file("long_header.jpg"));
  EXPECT_TRUE(c.ok()) << c.error;
  EXPECT_EQ(c.width, 160);
  long_header.resize(30000);  // cut inside that segment
  put(dir.path() / "long_header.jpg", long_header);
  EXPECT_FALSE(check_image_file(dir.file("long_header.jpg")).ok());
}

// ---- small images: --transform auto ----

void digits_like(const fs::path& data, int w, int h, int per_class) {
  for (const char* split : {"train", "val"})
    for (const char* cls : {"0", "1"})
      for (int i = 0; i < per_class; ++i)
        put(data / split / cls / fmt::format("{}.png", i), png_bytes(w, h, 1, uint32_t(i + 10 * (cls[0] - '0'))));
}

TEST(SmallImages, AutoTransformTakesImagesAllOfOneSmallSizeAsTheyAre) {
  TempDir dir;
  const fs::path data = dir.path() / "digits";
  digits_like(data, 20, 18, 3);
  DataOptions o;  // --image-size 224
  o.choose_transform = true;
  std::vector<std::string> notes;
  o.note = [&](const std::string& s) { notes.push_back(s); };
  const DataSplits s = open_dataset(data.string(), o);
  EXPECT_EQ(s.transform.kind, ImageTransform::Kind::Plain);
  EXPECT_FALSE(s.transform.augment.hflip);  // plain's default: no flips (a flipped digit is another glyph)
  EXPECT_EQ(s.train->shape().height, 18);
  EXPECT_EQ(s.train->shape().width, 20);
  ASSERT_EQ(notes.size(), 1u);
  for (const char* part : {"is 20x18, smaller than --image-size 224", "--transform plain", "--transform imagenet"})
    EXPECT_NE(notes[0].find(part), std::string::npos) << notes[0];
  // Flips asked for stay; the transform named is taken as named, silently.
  o.hflip_set = true, o.transform.augment.hflip = true;
  EXPECT_TRUE(open_dataset(data.string(), o).transform.augment.hflip);
  DataOptions named;
  named.note = o.note;
  notes.clear();
  EXPECT_EQ(open_dataset(data.string(), named).transform.kind, ImageTransform::Kind::ImageNet);
  EXPECT_TRUE(notes.empty());
  // Not smaller than the crop: imagenet.
  o.hflip_set = false, o.transform.size = 18;
  EXPECT_EQ(open_dataset(data.string(), o).transform.kind, ImageTransform::Kind::ImageNet);
  EXPECT_TRUE(open_dataset(data.string(), o).transform.augment.hflip);
}

TEST(SmallImages, ImagesOfSeveralSmallSizesKeepImagenetAndAreTold) {
  TempDir dir;
  const fs::path data = dir.path() / "mixed";
  digits_like(data, 20, 20, 2);
  put(data / "val" / "1" / "wide.png", png_bytes(30, 20, 1, 5));
  DataOptions o;
  o.choose_transform = true;
  std::vector<std::string> notes;
  o.note = [&](const std::string& s) { notes.push_back(s); };
  const DataSplits s = open_dataset(data.string(), o);
  EXPECT_EQ(s.transform.kind, ImageTransform::Kind::ImageNet);
  EXPECT_EQ(s.train->shape().height, 224);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("the largest 30x20"), std::string::npos) << notes[0];
}

TEST(SmallImages, PlainTransformRefusesAnotherSizeBeforeTheFirstBatchOrLeavesItOut) {
  TempDir dir;
  const fs::path data = dir.path() / "mixed";
  digits_like(data, 20, 20, 2);
  put(data / "val" / "1" / "wide.png", png_bytes(30, 20, 1, 5));
  DataOptions o;
  o.transform.kind = ImageTransform::Kind::Plain;
  testing::expect_error([&] { open_dataset(data.string(), o); },
                        {"1 of the 9 image files are not of one size, as --transform plain needs",
                         fmt::format("'{}' is 30x20 but the folder's images are 20x20",
                                     (data / "val" / "1" / "wide.png").string()),
                         "--transform imagenet", "--skip-bad"});
  o.skip_bad = true;
  const DataSplits s = open_dataset(data.string(), o);
  EXPECT_EQ(s.test->count(), 4);
  ASSERT_EQ(s.test->skipped().size(), 1u);
  EXPECT_NE(s.test->skipped()[0].find("wide.png"), std::string::npos);
}

}  // namespace
}  // namespace kiln

// Image folders through the public API (kiln/image_folder.h): layout, errors, and samples checked
// against a reference built from the same files with the codec and resampler directly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "data/image/crop_geometry.h"
#include "data/image/image_codec.h"
#include "data/image/resize.h"
#include "kiln/data.h"
#include "kiln/error.h"
#include "kiln/image_folder.h"
#include "support/cpu_test_util.h"
#include "support/temp_dir.h"
#include "support/test_pictures.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

using testing::picture;

void write_jpeg(const fs::path& path, int w, int h, uint32_t seed, JpegEncodeOptions o = {}) {
  fs::create_directories(path.parent_path());
  const std::vector<uint8_t> p = picture(w, h, 3, seed);
  write_bytes(path.string(), encode_jpeg(p.data(), w, h, 3, o));
}

// Encoder options without designated initializers (-Wmissing-field-initializers).
JpegEncodeOptions jpeg_options(int quality, bool subsample_420 = true) {
  JpegEncodeOptions o;
  o.quality = quality, o.subsample_420 = subsample_420;
  return o;
}

void write_png(const fs::path& path, const std::vector<uint8_t>& pixels, int w, int h, int c, PngEncodeOptions o = {}) {
  fs::create_directories(path.parent_path());
  write_bytes(path.string(), encode_png(pixels.data(), w, h, c, o));
}

// The samples a source gives for epoch 0 at `seed`, in index order.
std::vector<std::vector<uint8_t>> samples(const SampleSource& s, uint64_t seed = 7, int epoch = 0) {
  std::vector<std::vector<uint8_t>> out;
  for (int64_t i = 0; i < s.count(); ++i) {
    std::vector<uint8_t> px(s.shape().size());
    s.write_sample(i, seed, epoch, px.data());
    out.push_back(std::move(px));
  }
  return out;
}

TEST(ImageFolder, ScanSortsClassesAndFilesAsTorchvisionAndIgnoresOtherFiles) {
  TempDir dir;
  const fs::path root = dir.path() / "set";
  write_jpeg(root / "zebra" / "b.jpg", 40, 30, 1);
  write_jpeg(root / "zebra" / "a.JPEG", 40, 30, 2);
  write_jpeg(root / "zebra" / "sub" / "0.jpg", 40, 30, 3);
  write_png(root / "ant" / "x.png", picture(8, 8, 1, 4), 8, 8, 1);
  write_bytes((root / "ant" / "notes.txt").string(), {'h', 'i'});
  fs::create_directories(root / ".ipynb_checkpoints");
  const ImageFolderIndex index = scan_image_folder(root.string());
  EXPECT_EQ(index.classes, (std::vector<std::string>{"ant", "zebra"}));
  ASSERT_EQ(index.files.size(), 4u);
  EXPECT_EQ(fs::path(index.files[0]).filename(), "x.png");
  EXPECT_EQ(fs::path(index.files[1]).filename(), "a.JPEG");  // folder zebra before zebra/sub
  EXPECT_EQ(fs::path(index.files[2]).filename(), "b.jpg");
  EXPECT_EQ(fs::path(index.files[3]).filename(), "0.jpg");
  EXPECT_EQ(index.labels, (std::vector<int32_t>{0, 1, 1, 1}));
  EXPECT_TRUE(index.unsupported.empty());
}

TEST(ImageFolder, LayoutErrorsNameTheFolderAndTheFix) {
  TempDir dir;
  testing::expect_error([&] { scan_image_folder(dir.file("missing")); }, {"missing", "does not exist", "subfolder"});
  testing::expect_error([&] { scan_image_folder(dir.path().string()); }, {"no class subfolders"});
  write_jpeg(dir.path() / "cat" / "1.jpg", 16, 16, 1);
  fs::create_directories(dir.path() / "dog");
  testing::expect_error([&] { scan_image_folder(dir.path().string()); }, {"dog", "no JPEG or PNG"});
  write_bytes((dir.path() / "dog" / "1.bmp").string(), {'B', 'M'});
  testing::expect_error([&] { scan_image_folder(dir.path().string()); }, {"dog", "other image formats"});
  write_jpeg(dir.path() / "dog" / "2.jpg", 16, 16, 2);
  const ImageFolderIndex index = scan_image_folder(dir.path().string());
  ASSERT_EQ(index.unsupported.size(), 1u);
  DataOptions o;
  testing::expect_error([&] { open_dataset(dir.path().string(), o); }, {"1.bmp", "cannot read", "--skip-bad"});
  o.skip_bad = true;
  EXPECT_EQ(open_dataset(dir.path().string(), o).train->count(), 2);
}

TEST(ImageFolder, TrainAndValMustHoldTheSameClasses) {
  TempDir dir;
  write_jpeg(dir.path() / "train" / "cat" / "1.jpg", 16, 16, 1);
  write_jpeg(dir.path() / "train" / "dog" / "1.jpg", 16, 16, 2);
  write_jpeg(dir.path() / "val" / "cat" / "1.jpg", 16, 16, 3);
  write_jpeg(dir.path() / "val" / "emu" / "1.jpg", 16, 16, 4);
  EXPECT_EQ(detect_dataset_format(dir.path().string()), "imagefolder");
  testing::expect_error([&] { open_dataset(dir.path().string(), {}); }, {"different classes", "'dog'", "'emu'"});
  fs::remove_all(dir.path() / "val" / "emu");
  write_jpeg(dir.path() / "val" / "dog" / "1.jpg", 16, 16, 5);
  const DataSplits s = open_dataset(dir.path().string(), {});
  EXPECT_EQ(s.format, "imagefolder");
  EXPECT_EQ(s.train->count(), 2);
  EXPECT_EQ(s.test->count(), 2);
  EXPECT_EQ(s.train->class_names(), (std::vector<std::string>{"cat", "dog"}));
}

// --transform plain over PNGs gives exactly what the same pixels give as an in-memory Dataset:
// the same padded crops and flips, the same normalization statistics.
TEST(ImageFolder, PlainTransformEqualsTheInMemoryDataset) {
  TempDir dir;
  Dataset ds;
  ds.height = 12, ds.width = 10, ds.channels = 1, ds.num_classes = 3;
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 4; ++i) {
      const std::vector<uint8_t> p = picture(10, 12, 1, uint32_t(10 * c + i));
      write_png(dir.path() / "train" / std::to_string(c) / fmt::format("{:02d}.png", i), p, 10, 12, 1);
      ds.images.insert(ds.images.end(), p.begin(), p.end());
      ds.labels.push_back(c);
      ++ds.count;
    }
  DataOptions o;
  o.transform.kind = ImageTransform::Kind::Plain;
  o.transform.channels = 1;
  o.transform.augment = {2, true};
  const DataSplits s = open_dataset(dir.path().string(), o);
  const DatasetSource memory(ds, {2, true});
  ASSERT_EQ(s.train->shape().size(), memory.shape().size());
  EXPECT_EQ(s.train->shape().height, 12);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const auto a = samples(*s.train, 3, epoch), b = samples(memory, 3, epoch);
    EXPECT_EQ(a, b);
  }
  const ChannelStats mine = s.train->channel_stats(), theirs = compute_channel_stats(ds);
  EXPECT_EQ(mine.mean, theirs.mean);
  EXPECT_EQ(mine.std, theirs.std);
  // A different size is an error naming both files, before the first batch.
  write_png(dir.path() / "train" / "2" / "99.png", picture(9, 12, 1, 99), 9, 12, 1);
  testing::expect_error([&] { open_dataset(dir.path().string(), o); },
                        {"99.png", "9x12", "10x12", "00.png", "--transform imagenet"});
}

// The ImageNet training transform is RandomResizedCrop then flip: a sample equals the reference
// made from a full decode, the crop box drawn with the same key and PIL-style resampling of it.
TEST(ImageFolder, ImageNetTrainSampleIsTheRandomResizedCropOfTheImage) {
  TempDir dir;
  write_jpeg(dir.path() / "a" / "1.jpg", 300, 200, 1, jpeg_options(95));
  write_jpeg(dir.path() / "b" / "1.jpg", 180, 260, 2, jpeg_options(90, false));
  DataOptions o;
  o.transform.size = 64;
  o.transform.dct_scaling = false;
  const DataSplits s = open_dataset(dir.path().string(), o);
  const ImageFolderIndex index = scan_image_folder(dir.path().string());
  int flipped = 0;
  for (int epoch = 0; epoch < 6; ++epoch)
    for (int64_t i = 0; i < 2; ++i) {
      std::vector<uint8_t> got(64 * 64 * 3);
      s.train->write_sample(i, 11, epoch, got.data());
      const std::vector<uint8_t> bytes = testing::read_bytes(index.files[i]);
      const DecodedImage full = decode_image(bytes.data(), bytes.size(), index.files[i]);
      const uint64_t key = augment_bits(11, epoch, i);
      const CropBox box = random_resized_crop_box(full.width, full.height, {}, key);
      const ImageView view{full.pixels.data(), full.width, full.height, 3, int64_t(full.width) * 3};
      std::vector<uint8_t> plain(64 * 64 * 3), mirrored(64 * 64 * 3);
      resize_box_bilinear(view, box.x, box.y, box.width, box.height, box.x, box.y, box.x + box.width,
                          box.y + box.height, 64, 64, false, plain.data(), 64 * 3);
      resize_box_bilinear(view, box.x, box.y, box.width, box.height, box.x, box.y, box.x + box.width,
                          box.y + box.height, 64, 64, true, mirrored.data(), 64 * 3);
      // Partial decoding decodes whole iMCUs around the crop, so the crop's pixels are those of
      // the full decode and the sample is exact.
      EXPECT_TRUE(got == plain || got == mirrored) << "epoch " << epoch << " sample " << i;
      flipped += got == mirrored && got != plain;
    }
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, 12);
}

TEST(ImageFolder, EvaluationIsResizeThenCenterCrop) {
  TempDir dir;
  write_jpeg(dir.path() / "train" / "a" / "1.jpg", 120, 90, 1);
  write_jpeg(dir.path() / "val" / "a" / "1.jpg", 150, 100, 2, jpeg_options(95));
  DataOptions o;
  o.transform.size = 56;
  o.transform.eval_resize = 64;
  o.transform.dct_scaling = false;
  const DataSplits s = open_dataset(dir.path().string(), o);
  std::vector<uint8_t> got(56 * 56 * 3);
  s.test->write_sample(0, 1, 0, got.data());
  const std::string file = (dir.path() / "val" / "a" / "1.jpg").string();
  const std::vector<uint8_t> bytes = testing::read_bytes(file);
  const DecodedImage full = decode_image(bytes.data(), bytes.size(), file);
  // Resize(64): 150x100 -> 96x64; CenterCrop(56): left 20, top 4.
  std::vector<uint8_t> resized(96 * 64 * 3);
  const ImageView view{full.pixels.data(), full.width, full.height, 3, int64_t(full.width) * 3};
  resize_box_bilinear(view, 0, 0, 150, 100, 0, 0, 150, 100, 96, 64, false, resized.data(), 96 * 3);
  int worst = 0;
  for (int y = 0; y < 56; ++y)
    for (int x = 0; x < 56 * 3; ++x)
      worst = std::max(worst, std::abs(int(got[(y * 56) * 3 + x]) - int(resized[((y + 4) * 96 + 20) * 3 + x])));
  EXPECT_EQ(worst, 0);
  // Evaluation has no randomness: any seed or epoch gives the same sample.
  std::vector<uint8_t> again(got.size());
  s.test->write_sample(0, 99, 5, again.data());
  EXPECT_EQ(got, again);
}

// DCT scaling decodes a large photo at a fraction of its size when the crop allows: the sample
// stays close to the full-scale one (the 1/2-scale IDCT is a box-like reduction, the resample
// then a milder one), and is the same whatever the worker count.
TEST(ImageFolder, DctScalingStaysCloseToTheFullDecode) {
  TempDir dir;
  write_jpeg(dir.path() / "a" / "1.jpg", 640, 480, 5, jpeg_options(95));
  DataOptions full, scaled;
  full.transform.size = scaled.transform.size = 64;
  full.transform.dct_scaling = false;
  const DataSplits a = open_dataset(dir.path().string(), full), b = open_dataset(dir.path().string(), scaled);
  double sum = 0;
  int64_t n = 0;
  for (int epoch = 0; epoch < 8; ++epoch) {
    const auto x = samples(*a.train, 1, epoch), y = samples(*b.train, 1, epoch);
    for (size_t k = 0; k < x[0].size(); ++k, ++n) sum += std::abs(int(x[0][k]) - int(y[0][k]));
  }
  EXPECT_LT(sum / double(n), 3.0) << "mean abs difference of DCT-scaled samples";
}

// Evaluation decodes at full scale whatever --dct-scaling says, so its samples stay torchvision's
// (a 900x700 photo evaluated at 64 px would otherwise be decoded at 1/8 scale).
TEST(ImageFolder, EvaluationIgnoresDctScaling) {
  TempDir dir;
  write_jpeg(dir.path() / "train" / "a" / "1.jpg", 64, 64, 1);
  write_jpeg(dir.path() / "val" / "a" / "1.jpg", 900, 700, 2, jpeg_options(95));
  DataOptions on, off;
  on.transform.size = off.transform.size = 64;
  on.transform.eval_resize = off.transform.eval_resize = 73;
  off.transform.dct_scaling = false;
  const DataSplits a = open_dataset(dir.path().string(), on), b = open_dataset(dir.path().string(), off);
  EXPECT_EQ(samples(*a.test), samples(*b.test));
  // while training crops of the same photo do use it (a different sample)
  write_jpeg(dir.path() / "train" / "a" / "2.jpg", 900, 700, 2, jpeg_options(95));
  const DataSplits c = open_dataset(dir.path().string(), on), d = open_dataset(dir.path().string(), off);
  int differ = 0;
  for (int epoch = 0; epoch < 4; ++epoch) differ += samples(*c.train, 1, epoch)[1] != samples(*d.train, 1, epoch)[1];
  EXPECT_GT(differ, 0);
}

// Files that cannot be used are named before the first batch (every file is checked when the
// folder is opened), or, with --skip-bad, left out of the split and listed by skipped().
TEST(ImageFolder, BadFilesAreErrorsNamingThemOrSkippedAndListed) {
  TempDir dir;
  write_jpeg(dir.path() / "a" / "good.jpg", 64, 48, 1);
  write_bytes((dir.path() / "a" / "empty.jpg").string(), {});
  fs::create_directories(dir.path() / "b");
  write_bytes((dir.path() / "b" / "text.jpg").string(), {'h', 'e', 'l', 'l', 'o', '\n'});
  const std::vector<uint8_t> px = picture(64, 48, 3, 2);
  std::vector<uint8_t> jpeg = encode_jpeg(px.data(), 64, 48, 3, {});
  jpeg.resize(jpeg.size() / 2);
  write_bytes((dir.path() / "b" / "truncated.jpg").string(), jpeg);
  write_jpeg(dir.path() / "b" / "z.jpg", 64, 48, 3);
  DataOptions o;
  o.transform.size = 32;
  testing::expect_error([&] { open_dataset(dir.path().string(), o); },
                        {"3 of the 5 image files cannot be used", "empty.jpg", "text.jpg", "truncated.jpg", "--skip-bad"});
  o.skip_bad = true;
  const DataSplits lenient = open_dataset(dir.path().string(), o);
  BatchLoader loader(*lenient.train, 2, true, false, {}, {}, 3, 2);
  loader.start_epoch(0);
  Batch b;
  ASSERT_TRUE(loader.next(b));
  ASSERT_EQ(lenient.train->count(), 2);
  EXPECT_EQ(b.size, 2);
  const std::vector<std::string> skipped = lenient.train->skipped();
  ASSERT_EQ(skipped.size(), 3u);
  std::string all;
  for (const std::string& s : skipped) all += s + "\n";
  for (const char* name : {"empty.jpg", "text.jpg", "truncated.jpg"}) EXPECT_NE(all.find(name), std::string::npos) << all;
}

// A file that goes away after the folder was scanned (deleted or moved during training): an
// error naming it, or skipped and listed with --skip-bad. Runs as any user, root included.
TEST(ImageFolder, AFileRemovedAfterTheScanIsAnErrorNamingIt) {
  TempDir dir;
  write_jpeg(dir.path() / "a" / "1.jpg", 32, 32, 1);
  write_jpeg(dir.path() / "a" / "2.jpg", 32, 32, 2);
  DataOptions o;
  o.transform.size = 16;
  const DataSplits s = open_dataset(dir.path().string(), o);
  o.skip_bad = true;
  const DataSplits lenient = open_dataset(dir.path().string(), o);
  fs::remove(dir.path() / "a" / "1.jpg");
  std::vector<uint8_t> out(s.train->shape().size());
  testing::expect_error([&] { s.train->write_sample(0, 1, 0, out.data()); }, {"1.jpg", "cannot open", "--skip-bad"});
  EXPECT_EQ(lenient.train->write_sample(0, 1, 0, out.data()), 0);  // 2.jpg in its place, class a
  ASSERT_EQ(lenient.train->skipped().size(), 1u);
  EXPECT_NE(lenient.train->skipped()[0].find("1.jpg"), std::string::npos);
}

TEST(ImageFolder, UnreadableFileIsAnErrorNamingIt) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files whatever their permissions";
  TempDir dir;
  write_jpeg(dir.path() / "a" / "1.jpg", 32, 32, 1);
  fs::permissions(dir.path() / "a" / "1.jpg", fs::perms::none);
  testing::expect_error([&] { open_dataset(dir.path().string(), {}); }, {"1.jpg", "cannot open", "--skip-bad"});
}

// Unusual but valid files decode as PIL's convert('RGB') would have them: alpha dropped, 16-bit
// reduced to 8, CMYK and grayscale JPEGs converted.
TEST(ImageFolder, UnusualValidFilesTrain) {
  TempDir dir;
  const std::vector<uint8_t> rgb = picture(40, 40, 3, 1), gray = picture(40, 40, 1, 2);
  PngEncodeOptions alpha, deep;
  alpha.alpha = true, alpha.alpha_value = 7;
  deep.sixteen_bit = true;
  write_png(dir.path() / "a" / "alpha.png", rgb, 40, 40, 3, alpha);
  write_png(dir.path() / "a" / "deep.png", rgb, 40, 40, 3, deep);
  write_png(dir.path() / "a" / "gray.png", gray, 40, 40, 1);
  JpegEncodeOptions cmyk, progressive, rotated;
  cmyk.cmyk = true, progressive.progressive = true, rotated.exif_orientation = 6;
  write_jpeg(dir.path() / "b" / "cmyk.jpg", 40, 40, 3, cmyk);
  write_jpeg(dir.path() / "b" / "progressive.jpg", 40, 40, 4, progressive);
  write_jpeg(dir.path() / "b" / "rotated.jpg", 40, 40, 5, rotated);
  DataOptions o;
  o.transform.size = 24;
  const DataSplits s = open_dataset(dir.path().string(), o);
  ASSERT_EQ(s.train->count(), 6);
  for (const auto& px : samples(*s.train)) {
    double mean = 0;
    for (uint8_t v : px) mean += v;
    mean /= double(px.size());
    EXPECT_GT(mean, 20);  // real content, not a black fill
    EXPECT_LT(mean, 235);
  }
}

TEST(ImageFolder, SamplesDoNotDependOnWorkerCount) {
  TempDir dir;
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 5; ++i) write_jpeg(dir.path() / std::to_string(c) / fmt::format("{}.jpg", i), 90, 70, 7 * c + i);
  DataOptions o;
  o.transform.size = 32;
  const DataSplits s = open_dataset(dir.path().string(), o);
  std::vector<std::vector<float>> first;
  for (int workers : {0, 1, 4}) {
    BatchLoader loader(*s.train, 4, true, true, {0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f}, 9, workers, 2);
    std::vector<std::vector<float>> got;
    for (int epoch = 0; epoch < 2; ++epoch) {
      loader.start_epoch(epoch);
      Batch b;
      while (loader.next(b)) got.push_back(b.images);
    }
    if (first.empty()) first = got;
    EXPECT_EQ(got, first) << workers << " workers";
  }
}

// Ranks of a data-parallel run split each epoch's batches; together they deliver the one-rank
// epoch's batches, whatever the world size.
TEST(ImageFolder, ShardsSplitTheEpochBetweenRanks) {
  Dataset ds;
  ds.height = ds.width = 2, ds.channels = 1, ds.num_classes = 1;
  for (int i = 0; i < 24; ++i) {
    for (int k = 0; k < 4; ++k) ds.images.push_back(uint8_t(i));
    ds.labels.push_back(0);
    ++ds.count;
  }
  const DatasetSource source(ds);
  auto epoch_of = [&](LoaderShard shard) {
    BatchLoader loader(source, 3, true, true, {}, {}, 5, 1, 2, shard);
    loader.start_epoch(1);
    std::vector<std::vector<float>> out;
    Batch b;
    while (loader.next(b)) out.push_back(b.images);
    return out;
  };
  const auto whole = epoch_of({});
  ASSERT_EQ(whole.size(), 8u);
  const auto r0 = epoch_of({0, 2}), r1 = epoch_of({1, 2});
  ASSERT_EQ(r0.size(), 4u);
  ASSERT_EQ(r1.size(), 4u);
  for (size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(r0[b], whole[2 * b]);
    EXPECT_EQ(r1[b], whole[2 * b + 1]);
  }
  testing::expect_error([&] { BatchLoader(source, 3, true, true, {}, {}, 5, 1, 2, {2, 2}); }, {"rank 2", "world"});
}

}  // namespace
}  // namespace kiln

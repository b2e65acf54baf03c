// OpenCV's digits.png sheet -> the "digits" IDX dataset (see shared/data/digits/README.md).
#include <filesystem>

#include "kiln/data.h"
#include "kiln/error.h"

namespace kiln {
namespace {

constexpr int64_t kSheetWidth = 2000, kSheetHeight = 1000, kTile = 20;
constexpr int64_t kRows = kSheetHeight / kTile, kCols = kSheetWidth / kTile;  // 50 x 100
constexpr int64_t kTrainCols = 80, kRowsPerDigit = 5;
constexpr uint64_t kTrainSeed = 20240601, kTestSeed = 20240602;

Dataset empty_digits() {
  Dataset ds;
  ds.height = ds.width = kTile;
  ds.channels = 1;
  ds.num_classes = 10;
  return ds;
}

void append_tile(const std::vector<uint8_t>& gray, int64_t row, int64_t col, Dataset& ds) {
  for (int64_t y = 0; y < kTile; ++y) {
    const uint8_t* line = gray.data() + (row * kTile + y) * kSheetWidth + col * kTile;
    ds.images.insert(ds.images.end(), line, line + kTile);
  }
  ds.labels.push_back(int32_t(row / kRowsPerDigit));
  ++ds.count;
}

Dataset shuffled(const Dataset& ds, uint64_t seed) {
  Dataset out = empty_digits();
  const int64_t size = ds.image_size();
  for (int64_t i : epoch_permutation(ds.count, seed, 0)) {
    out.images.insert(out.images.end(), ds.images.begin() + i * size, ds.images.begin() + (i + 1) * size);
    out.labels.push_back(ds.labels[i]);
    ++out.count;
  }
  return out;
}

}  // namespace

DigitsSplit split_digits(const std::vector<uint8_t>& gray, int64_t width, int64_t height) {
  if (width != kSheetWidth || height != kSheetHeight)
    fail("digits sheet is {}x{}, expected {}x{} (OpenCV's samples/data/digits.png)", width,
         height, kSheetWidth, kSheetHeight);
  if (int64_t(gray.size()) != width * height)
    fail("digits sheet buffer has {} bytes, expected {} for {}x{} grayscale", gray.size(),
         width * height, width, height);
  Dataset train = empty_digits(), test = empty_digits();
  for (int64_t row = 0; row < kRows; ++row)
    for (int64_t col = 0; col < kCols; ++col) append_tile(gray, row, col, col < kTrainCols ? train : test);
  return {shuffled(train, kTrainSeed), shuffled(test, kTestSeed)};
}

void make_digits_idx(const std::vector<uint8_t>& gray, int64_t width, int64_t height,
                     const std::string& out_dir) {
  DigitsSplit split = split_digits(gray, width, height);
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) fail("cannot create output directory '{}': {}", out_dir, ec.message());
  auto path = [&](const char* name) { return (std::filesystem::path(out_dir) / name).string(); };
  write_idx(split.train, path("train-images-idx3-ubyte"), path("train-labels-idx1-ubyte"));
  write_idx(split.test, path("t10k-images-idx3-ubyte"), path("t10k-labels-idx1-ubyte"));
}

}  // namespace kiln

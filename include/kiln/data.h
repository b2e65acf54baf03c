#pragma once
// Image classification datasets (MNIST-style IDX, CIFAR-10 binary), augmentation,
// per-channel normalization and a prefetching batch loader.
//
// Everything random here (shuffle order, crop offsets, flips) is a pure function of
// (seed, epoch, sample), so a run is reproducible whatever the worker count or timing.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

// Images are stored NHWC as raw uint8 pixels; labels are class indices in [0, num_classes).
struct Dataset {
  int64_t count = 0, height = 0, width = 0, channels = 0;
  std::vector<uint8_t> images;  // count * height * width * channels, NHWC
  std::vector<int32_t> labels;  // count
  int num_classes = 0;

  int64_t image_size() const { return height * width * channels; }
};

// ---- readers (every malformed input throws kiln::Error naming the file and the problem) ----

// MNIST IDX pair: images magic 0x00000803 (N, H, W), labels magic 0x00000801 (N).
Dataset read_idx(const std::string& images_path, const std::string& labels_path,
                 int num_classes = 10);

// CIFAR-10 binary batches: records of 1 label byte + 3072 bytes CHW 32x32; stored as HWC.
Dataset read_cifar10(const std::vector<std::string>& batch_files);

// Standard file names inside `dir`:
//   "idx":     train-images-idx3-ubyte / train-labels-idx1-ubyte (train),
//              t10k-images-idx3-ubyte / t10k-labels-idx1-ubyte (test)
//   "cifar10": data_batch_1.bin .. data_batch_5.bin (train), test_batch.bin (test),
//              directly in dir or in dir/cifar-10-batches-bin.
Dataset load_dataset(const std::string& dir, const std::string& format, bool train);

// ---- writers ----

// Writes a single-channel dataset as an IDX pair; each file is written atomically
// (temporary file + rename), so readers never see a half-written file.
void write_idx(const Dataset& dataset, const std::string& images_path,
               const std::string& labels_path);

// ---- OpenCV digits.png -> IDX (the PNG decode itself lives in tools/make_digits.cpp) ----

struct DigitsSplit {
  Dataset train, test;
};

// `gray` is the decoded 2000x1000 (width x height) 8-bit image, row-major: 50 rows x 100
// columns of 20x20 digits, row r holding digit r/5. Columns 0-79 go to train, 80-99 to test;
// each set is shuffled with a fixed seed.
DigitsSplit split_digits(const std::vector<uint8_t>& gray, int64_t width, int64_t height);

// split_digits, then the four standard IDX files into out_dir (created if missing).
void make_digits_idx(const std::vector<uint8_t>& gray, int64_t width, int64_t height,
                     const std::string& out_dir);

// ---- transforms ----

struct Augment {
  int pad_crop = 0;    // zero-pad by this many pixels, then crop a random HxW window
  bool hflip = false;  // mirror left-right with probability 0.5
};

// Per-channel mean and (population) standard deviation of pixel / 255.
struct ChannelStats {
  std::vector<float> mean, std;
};
ChannelStats compute_channel_stats(const Dataset& dataset);

// The shuffle order of one epoch: a permutation of [0, n) that depends only on (seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int epoch);

// ---- batch loader ----

struct Batch {
  std::vector<float> images;     // batch * H * W * C, NHWC, normalized
  std::vector<int32_t> labels;   // batch
  // Real samples in this batch. A last partial batch (drop_last = false) is padded to the
  // full batch size with zero images and label 0, and has size < batch.
  int64_t size = 0;
};

// Builds normalized float batches on worker threads ahead of the consumer and hands them
// out strictly in order. Pixels become (pixel / 255 - mean[c]) / std[c]; an empty mean/std
// means 0/1. Crop padding is pixel value 0 (before normalization), as in torchvision.
//
// Usage: for each epoch, start_epoch(e); then next(batch) until it returns false.
// workers = 0 builds each batch in the calling thread inside next(). The loader keeps a
// reference to `dataset`, which must outlive it.
class BatchLoader {
 public:
  BatchLoader(const Dataset& dataset, int batch, bool shuffle, bool drop_last, Augment augment,
              std::vector<float> mean, std::vector<float> std, uint64_t seed, int workers = 2,
              int prefetch = 4);
  ~BatchLoader();  // stops and joins the workers, also in the middle of an epoch
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Abandons any unfinished epoch and starts building the batches of `epoch`.
  void start_epoch(int epoch);
  int64_t batches_per_epoch() const;
  // The next batch of the current epoch; false once the epoch is exhausted. Rethrows an
  // error raised while building the batch.
  bool next(Batch& out);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln

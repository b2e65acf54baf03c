#pragma once
// Image classification datasets (MNIST-style IDX, CIFAR-10 binary; image folders and packed
// files in kiln/image_folder.h), augmentation, per-channel normalization and a prefetching batch
// loader that draws from any SampleSource.
//
// Everything random here (shuffle order, crop offsets, flips) is a pure function of
// (seed, epoch, sample), so a run is reproducible whatever the worker count or timing.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/device_pixels.h"

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
// ImageNet's RGB mean and std, as torchvision normalizes for its weights.
ChannelStats imagenet_channel_stats();

// The shuffle order of one epoch: a permutation of [0, n) that depends only on (seed, epoch).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int epoch);

// The 64 random bits that decide sample `index`'s augmentation in `epoch` (a stream of their own,
// independent of the shuffle's).
uint64_t augment_bits(uint64_t seed, int epoch, int64_t index);

// ---- sample sources: what the batch loader draws from ----

struct SampleShape {
  int64_t height = 0, width = 0, channels = 0;
  int64_t size() const { return height * width * channels; }
};

// What a GPU decoder needs to produce one training sample: decode `bytes` (a JPEG), resample the
// source box to the sample's size with PIL's bilinear filter seeing only the box (torchvision
// crops, then resizes), mirror when `flip`.
struct GpuCropPlan {
  std::vector<uint8_t> bytes;
  int32_t label = 0;
  int x = 0, y = 0, width = 0, height = 0;  // the box, in stored-image pixels
  bool flip = false;
};

// Labelled samples of one geometry, each produced on demand (decoded, cropped, augmented) as
// uint8 HWC pixels. Implementations are safe to call from several threads at once.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t count() const = 0;
  virtual int num_classes() const = 0;
  // Class names by label, where the data names them (image folders); empty otherwise.
  virtual std::vector<std::string> class_names() const { return {}; }
  virtual SampleShape shape() const = 0;
  // Writes sample `index` (shape().size() bytes, HWC) to `out` and returns its label. Any
  // randomness (augmentation) is a pure function of (seed, epoch, index). A sample that cannot be
  // read is a kiln::Error naming it, unless the source skips bad samples: then a replacement,
  // chosen by a fixed rule, is written and its label returned.
  virtual int32_t write_sample(int64_t index, uint64_t seed, int epoch, uint8_t* out) const = 0;
  // The per-channel mean and std (of pixel / 255) a model trained on this source normalizes with.
  virtual ChannelStats channel_stats() const = 0;
  // What messages call sample `index` (a file, a record).
  virtual std::string sample_name(int64_t index) const;
  // Samples skipped so far as unreadable (skipping sources only), each named once.
  virtual std::vector<std::string> skipped() const { return {}; }
  // Training samples a GPU may decode (--decode gpu): the encoded JPEG of sample `index` and the
  // crop and flip write_sample would apply, drawn from the same (seed, epoch, index). False when
  // the sample needs the CPU path (not a JPEG, CMYK, EXIF rotation asked for, an evaluation or
  // plain transform, an unreadable file): write_sample then handles it, errors included.
  virtual bool plan_gpu_crop(int64_t index, uint64_t seed, int epoch, GpuCropPlan& plan) const;
};

// An in-memory Dataset with the padded-crop/flip augmentation (none when `augment` is empty).
// Keeps a reference: `dataset` must outlive the source.
class DatasetSource : public SampleSource {
 public:
  DatasetSource(const Dataset& dataset, Augment augment = {});
  int64_t count() const override { return data_.count; }
  int num_classes() const override { return data_.num_classes; }
  SampleShape shape() const override { return {data_.height, data_.width, data_.channels}; }
  int32_t write_sample(int64_t index, uint64_t seed, int epoch, uint8_t* out) const override;
  ChannelStats channel_stats() const override { return compute_channel_stats(data_); }

 private:
  const Dataset& data_;
  Augment augment_;
};

// Which share of each epoch a loader delivers when several processes train together: the
// epoch's order is cut into batches, and rank r takes batches r, r + world, r + 2 world, ...
// The order itself depends only on (seed, epoch), whatever the world size.
struct LoaderShard {
  int rank = 0, world = 1;
};

// ---- batch loader ----

// Where training images are decoded: on the loader's CPU threads, or by the GPU (nvJPEG, with the
// CPU threads decoding what the GPU cannot and sharing the rest). Gpu: the GPU decodes as much as
// it can. Auto: on a CUDA run from JPEGs where nvJPEG is built in, the CPU threads decode and the
// GPU finishes only the batch the trainer is waiting for; elsewhere the CPU path. docs/results.md
// has the measurements behind the choice.
enum class DecodeDevice { Auto, Cpu, Gpu };
DecodeDevice parse_decode_device(const std::string& name);  // "auto", "cpu", "gpu"; else kiln::Error


struct Batch {
  std::vector<float> images;     // batch * H * W * C, NHWC, normalized
  // Instead of `images` when the loader delivers pixels (BatchLoader::deliver_pixels): the same
  // values as uint8, before normalization, for the consumer to normalize (on the GPU). Padding
  // rows of a partial batch are pixel 0 here (0.0 after normalization in `images`).
  std::vector<uint8_t> pixels;
  // Instead of both when the GPU decodes (DecodeDevice::Gpu): the pixels on the device.
  std::shared_ptr<DevicePixels> device;
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
// reference to `source` (or `dataset`), which must outlive it.
// What the trainer draws batches from: a BatchLoader, or the GPU-decoding loader.
class BatchStream {
 public:
  virtual ~BatchStream() = default;
  virtual void start_epoch(int epoch) = 0;
  virtual int64_t batches_per_epoch() const = 0;
  virtual bool next(Batch& out) = 0;
  // What decoded the batches so far, for reports (empty: nothing to say).
  virtual std::string describe() const { return {}; }
  // Seconds next() has held the consumer back so that it stays at most two batches ahead of the
  // GPU's reads (the GPU decode path; the CPU path's staging buffers pace it elsewhere): time spent
  // there is not waiting for data.
  virtual double paced_seconds() const { return 0; }
};

class BatchLoader : public BatchStream {
 public:
  BatchLoader(const SampleSource& source, int batch, bool shuffle, bool drop_last, std::vector<float> mean,
              std::vector<float> std, uint64_t seed, int workers = 2, int prefetch = 4, LoaderShard shard = {});
  // The same over an in-memory dataset augmented by `augment` (a DatasetSource the loader owns).
  BatchLoader(const Dataset& dataset, int batch, bool shuffle, bool drop_last, Augment augment,
              std::vector<float> mean, std::vector<float> std, uint64_t seed, int workers = 2,
              int prefetch = 4);
  ~BatchLoader() override;  // stops and joins the workers, also in the middle of an epoch
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Batches carry uint8 pixels (Batch::pixels) and leave normalization to the consumer: a GPU
  // trainer sends a quarter of the bytes and normalizes on the device. Takes effect at the next
  // start_epoch.
  void deliver_pixels(bool on);
  // The normalization the loader applies (or leaves to the consumer): value = pixel * scale[c] +
  // bias[c].
  const std::vector<float>& normalization_scale() const;
  const std::vector<float>& normalization_bias() const;
  // Abandons any unfinished epoch and starts building the batches of `epoch`.
  void start_epoch(int epoch) override;
  int64_t batches_per_epoch() const override;
  // The next batch of the current epoch; false once the epoch is exhausted. Rethrows an
  // error raised while building the batch.
  bool next(Batch& out) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln

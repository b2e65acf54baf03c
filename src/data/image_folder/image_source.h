#pragma once
// Encoded images (files or packed records) as training or evaluation samples: decode only what
// the crop needs, resample, flip, in the transform's geometry.
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "data/image/crop_geometry.h"
#include "data/image_folder/record_reader.h"
#include "kiln/image_folder.h"

namespace kiln {

class ImageSource : public SampleSource {
 public:
  // `left_out`: records the caller left out before (the file check, with skip_bad), "file: why"
  // each, listed by skipped() with those skipped here.
  ImageSource(std::unique_ptr<RecordReader> records, std::vector<std::string> classes, ImageTransform transform,
              bool train, bool skip_bad, const std::vector<std::string>& left_out = {});
  int64_t count() const override { return records_->count(); }
  int num_classes() const override { return int(classes_.size()); }
  std::vector<std::string> class_names() const override { return classes_; }
  SampleShape shape() const override { return shape_; }
  int32_t write_sample(int64_t index, uint64_t seed, int epoch, uint8_t* out) const override;
  ChannelStats channel_stats() const override;
  std::string sample_name(int64_t index) const override { return records_->name(index); }
  std::vector<std::string> skipped() const override;
  bool plan_gpu_crop(int64_t index, uint64_t seed, int epoch, GpuCropPlan& plan) const override;

 private:
  // Sample `record` through the training or the evaluation transform, with the randomness of
  // sample `key` (they differ only when a bad record is replaced).
  // The training crop of a `width` x `height` image (as displayed) for sample `key`, and its flip.
  CropBox train_crop(int width, int height, int64_t key, uint64_t seed, int epoch, bool& flip) const;
  void transform(int64_t record, int64_t key, uint64_t seed, int epoch, bool train, uint8_t* out) const;

  std::unique_ptr<RecordReader> records_;
  std::vector<std::string> classes_;
  ImageTransform t_;
  bool train_, skip_bad_;
  SampleShape shape_;
  mutable std::mutex bad_mu_;
  mutable std::set<std::string> bad_;  // "file: reason", each once
};

}  // namespace kiln

#include "cli/model_file_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "cli/class_name_lists.h"
#include "cli/model_file_metadata.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

// The data as the Trainer sees it: every sample as `data` gives it, the normalization and class
// names as the file says.
class FileLabelledSource : public SampleSource {
 public:
  FileLabelledSource(const SampleSource& data, FileDataUse use) : data_(data), use_(std::move(use)) {}
  int64_t count() const override { return data_.count(); }
  int num_classes() const override { return data_.num_classes(); }
  std::vector<std::string> class_names() const override {
    return use_.class_names.empty() ? data_.class_names() : use_.class_names;
  }
  SampleShape shape() const override { return data_.shape(); }
  int32_t write_sample(int64_t index, uint64_t seed, int epoch, uint8_t* out) const override {
    return data_.write_sample(index, seed, epoch, out);
  }
  ChannelStats channel_stats() const override {
    return use_.normalization ? *use_.normalization : data_.channel_stats();
  }
  std::string sample_name(int64_t index) const override { return data_.sample_name(index); }
  std::vector<std::string> skipped() const override { return data_.skipped(); }
  bool plan_gpu_crop(int64_t index, uint64_t seed, int epoch, GpuCropPlan& plan) const override {
    return data_.plan_gpu_crop(index, seed, epoch, plan);
  }

 private:
  const SampleSource& data_;
  const FileDataUse use_;
};

// The file's metadata value of `key` as it is written ("" when absent), for notes.
std::string raw(const ModelSource& source, const char* key) {
  const auto it = source.imported->metadata.find(key);
  return it == source.imported->metadata.end() ? std::string() : it->second;
}

void use_normalization(const ModelSource& source, const TrainArgs& a, int channels, FileDataUse& use) {
  if (a.data.normalize != "auto") {
    if (has_file_normalization(source))
      use.notes.push_back(fmt::format("--normalize {}: normalizing as it says, not with the file's mean {} and std {} "
                                      "(its metadata), which its weights were trained with", a.data.normalize,
                                      raw(source, kNormMeanKey), raw(source, kNormStdKey)));
    return;
  }
  use.normalization = file_normalization(source, channels);
  if (use.normalization)
    use.notes.push_back(fmt::format("normalizing with the file's mean {} and std {}, which its weights were trained "
                                    "with (its metadata norm_mean, norm_std); --normalize dataset or imagenet "
                                    "normalizes otherwise", floats_text(use.normalization->mean),
                                    floats_text(use.normalization->std)));
}

void use_class_names(const ModelSource& source, const SampleSource& train, const std::string& data, int classes,
                     FileDataUse& use) {
  const std::optional<std::vector<std::string>> theirs = file_class_names(source, classes);
  if (!theirs) return;
  const std::vector<std::string> ours = train.class_names();
  if (ours.empty()) {
    use.class_names = *theirs;
    use.notes.push_back(fmt::format("the data names no classes: its labels 0 to {} take the names of the file's "
                                    "metadata class_names, {}, which the checkpoint records for eval and predict",
                                    theirs->size() - 1, class_names_text(*theirs)));
    return;
  }
  const std::optional<size_t> c = first_differing_label(ours, *theirs);
  if (!c) return;
  // A label one side leaves unnamed (more classes than the other names) reads "unnamed".
  auto name = [&](const std::vector<std::string>& names) {
    return *c < names.size() ? fmt::format("'{}'", names[*c]) : std::string("unnamed");
  };
  const std::string mine = name(ours), file = name(*theirs);
  const std::string order =
      same_names_reordered(ours, *theirs)
          ? " (the same names in another order: kiln labels class folders in the sorted order of their names)"
          : "";
  fail("'{}' names its classes otherwise than --model '{}', whose last layer was trained on the file's classes: the "
       "data's class {} is {}, the file's {}{}. Training would teach the output for {} to mean {}. Give --new-head to "
       "train the last layer anew for the data's classes (the rest starts from the file's weights), or train on data "
       "of the file's classes ({})", data, source.name, *c, mine, file, order, file, mine, class_names_text(*theirs));
}

}  // namespace

FileDataUse file_data_use(const ModelSource& source, const TrainArgs& a, const SampleSource& train,
                          const std::string& data, int classes, int channels) {
  FileDataUse use;
  // The metadata describes the file's weights: a run that does not start from them owes it nothing.
  if (!source.is_file() || a.no_weights || !a.init_from.empty()) return use;
  use_normalization(source, a, channels, use);
  // The class names label the file's last layer: a new one (another count, --new-head) has none yet.
  if (!source.new_head && !a.new_head) use_class_names(source, train, data, classes, use);
  return use;
}

std::unique_ptr<SampleSource> with_file_data(const SampleSource& train, const FileDataUse& use) {
  if (!use.normalization && use.class_names.empty()) return nullptr;
  return std::make_unique<FileLabelledSource>(train, use);
}

}  // namespace kiln::cli

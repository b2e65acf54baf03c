#include "cli/train_data_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "data/dataset_formats.h"
#include "kiln/error.h"
#include "kiln/zoo.h"

namespace kiln::cli {
namespace {

std::string size_text(const SampleShape& s) { return fmt::format("{}x{}x{}", s.height, s.width, s.channels); }

// Where the test split of --data is, for messages (the format's own words; "the test split of
// <dir>" for a format the registry does not know, which open_dataset never returns).
std::string test_set_name(const TrainArgs& a, const std::string& format) {
  const DatasetFormat* row = find_dataset_format(format);
  return row ? row->test_split_name(a.data.data, a.data.val) : "the test split of " + a.data.data;
}

bool has_class_folders(const std::string& format) {
  const DatasetFormat* row = find_dataset_format(format);
  return row && row->class_folders;
}

}  // namespace

std::string no_test_set_reason(const TrainArgs& a, const std::string& format) {
  if (has_class_folders(format) && a.data.val.empty())
    return fmt::format("{} has no validation folder (DIR/val beside DIR/train, or one given with --val DIR)",
                       a.data.data);
  return fmt::format("{} holds no images", test_set_name(a, format));
}

void check_data_fits(const CommonOptions& o, const TrainArgs& a, const DataSplits& data, const Blueprint& model) {
  const SampleShape shape = data.train->shape();
  const bool image_files = reads_image_files(data.format);
  if (data.test->count() > 0) {
    const SampleShape t = data.test->shape();
    if (t.height != shape.height || t.width != shape.width || t.channels != shape.channels)
      fail("{} has {} images but the training set of {} has {}: the model is compiled for the training "
           "images' size and cannot evaluate others, so nothing was trained. Give a test set of {} images{}",
           test_set_name(a, data.format), size_text(t), a.data.data, size_text(shape), size_text(shape),
           image_files ? ", or use --transform imagenet, which brings every image to --image-size" : "");
  }
  const int side = std::min(shape.height, shape.width);
  if (a.data.crop_pad > 0 && a.data.crop_pad >= side)
    fail("--crop-pad {} is not smaller than the images' side ({}x{} in {}): the random crop shifts the image "
         "by up to the pad, so a shift of {} or more pixels leaves a crop of padding only, without a pixel of "
         "the image. Use a pad below {}, e.g. --crop-pad {} (an eighth of the side), or 0 for no random crop",
         a.data.crop_pad, shape.height, shape.width, a.data.data, side, side, std::max(1, side / 8));
  CompileOptions probe;
  probe.input_hwc = {shape.height, shape.width, shape.channels};
  probe.fuse_cbr = o.compile.fuse_cbr;
  const int smallest = min_input_side(model, probe);
  if (smallest > 0 && side < smallest) {
    std::vector<std::string> fitting;  // the zoo's models that take images this small
    for (const std::string& name : zoo::names()) {
      const int need = min_input_side(zoo::by_name(name), probe);
      if (need > 0 && need <= side) fitting.push_back(name);
    }
    fail("model '{}' needs images of at least {}x{} but {} holds {}x{} images: its poolings and strides "
         "would shrink them to nothing. Use {}, or images of at least {}x{}{}",
         o.model, smallest, smallest, a.data.data, shape.height, shape.width,
         fitting.empty() ? std::string("another model")
                         : fmt::format("a model that takes {}x{} images (--model {})", shape.height, shape.width,
                                       fmt::join(fitting, ", ")),
         smallest, smallest,
         has_class_folders(data.format) && data.transform.kind == ImageTransform::Kind::ImageNet
             ? fmt::format(" (--image-size {})", smallest)
             : std::string());
  }
}

// Batch normalization over one image per step is allowed (PyTorch allows it for convolutions
// too), but the run rarely learns, so it is said up front. The learning rate is named too when it
// is over 4 times what the linear scaling rule gives for one image from the default recipe (--lr
// 0.05 at --batch 64).
void warn_batch_of_one(const CommonOptions& o, const TrainArgs& a, const Blueprint& model, const CompileOptions& c) {
  if (o.compile.batch != 1) return;
  const LayerGraph graph = expand(model, c);
  const int bn = graph.count(LayerKind::BatchNorm) + graph.count(LayerKind::CBR);
  if (bn == 0) return;
  const bool high_lr = a.train.schedule.lr > 4 * 0.05 / 64;
  fmt::print(stderr,
             "warning: --batch 1 with batch normalization ({} BN layers in {}): in training each BN layer "
             "normalizes by the statistics of one image, which are noisy and unlike the running statistics "
             "evaluation uses{}; such runs tend to stay at chance level or diverge. Use --batch 16 or more{}\n",
             bn, o.model,
             high_lr ? fmt::format(", and --lr {} is meant for batches of tens of images", a.train.schedule.lr) : std::string(),
             high_lr ? fmt::format(", or at least a learning rate scaled down with the batch (--lr {:.2g} is {}/64)",
                                   a.train.schedule.lr / 64, a.train.schedule.lr)
                     : std::string());
}

// No better than guessing: within 3 binomial standard deviations of 1/classes over an epoch's
// samples. Not said where an epoch holds too few images for 3 deviations to stay under twice chance.
void warn_at_chance(const std::vector<EpochReport>& reports, const SampleSource& train) {
  const int classes = train.num_classes();
  if (reports.empty() || classes < 2 || train.count() <= 0) return;
  const double chance = 1.0 / classes;
  const double bound = chance + 3 * std::sqrt(chance * (1 - chance) / double(train.count()));
  const EpochReport& last = reports.back();
  // Too few images to tell chance from twice chance: nothing to say.
  if (bound >= 2 * chance || last.train_accuracy > bound) return;
  fmt::print(stderr,
             "warning: the training accuracy of the last epoch, {:.4f}, is no better than chance (1/{} = {:.4f}; "
             "guessing stays under {:.4f} over {} images 99.9% of the time): the model has not learned. A learning "
             "rate too high for the batch (lower --lr, raise --batch, add --warmup) or too few epochs are the usual "
             "causes\n",
             last.train_accuracy, classes, chance, bound, train.count());
}

}  // namespace kiln::cli

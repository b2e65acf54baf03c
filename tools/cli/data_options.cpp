#include "cli/data_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "cli/data_source.h"
#include "cli/option_checks.h"
#include "data/dataset_formats.h"
#include "kiln/error.h"
#include "kiln/threads.h"
#include "train/recipe_fields.h"

namespace kiln::cli {
namespace {

// "auto" is the imagenet kind until open_dataset chooses (DataOptions::choose_transform).
ImageTransform::Kind parse_transform(const std::string& name) {
  if (name == "imagenet" || name == "auto") return ImageTransform::Kind::ImageNet;
  if (name == "plain") return ImageTransform::Kind::Plain;
  fail("unknown transform '{}': use auto (plain for images all of one size smaller than --image-size, else "
       "imagenet), imagenet (random resized crops for training, resize + center crop for evaluation) or plain "
       "(images at their own size)", name);
}

ImageTransform::Normalize parse_normalize(const std::string& name) {
  if (name == "auto") return ImageTransform::Normalize::Auto;
  if (name == "imagenet") return ImageTransform::Normalize::ImageNet;
  if (name == "dataset") return ImageTransform::Normalize::Dataset;
  fail("unknown normalization '{}': use auto, imagenet or dataset", name);
}


std::string number(double x) { return fmt::format("{}", x); }

// A whole number >= 0, else a message with the range and a value to use (at_least, whose range
// kiln's message for a number past an int's also gives).
CLI::Validator non_negative(std::string fix) { return at_least(0, std::move(fix)); }

}  // namespace

void add_data_options(CLI::App* app, DataArgs& a, bool training) {
  const std::string group = "Data";
  app->add_option("--data,-d", a.data,
                  "dataset folder: IDX files, CIFAR-10 batches, an image folder (class subfolders, or train/ and "
                  "val/ holding them) or a kiln pack")
      ->group(group);
  app->add_option("--format", a.format, dataset_format_choices("auto (from what --data holds)"))
      ->check(parsed_by([](const std::string& f) { chosen_dataset_format(f); }))
      ->group(group);
  app->add_option("--val", a.val, "image folders: the validation folder (default: <data>/val when there is one)")
      ->type_name("DIR")
      ->group(group);
  app->add_option("--workers", a.workers,
                  "data loader threads, >= 0 (0: load on the training thread; more than 4 x the cores, at least 64, "
                  "are capped to that); default: the cores left after the training thread for image files, 2 "
                  "otherwise")
      ->check(non_negative("use e.g. --workers 2, or 0 to load batches on the training thread"))
      ->default_str("auto")
      ->group(group);
  if (training)
    app->add_option("--decode", a.decode,
                    "who decodes training JPEGs on a CUDA run: cpu (the loader threads), gpu (nvJPEG, the GPU's JPEG "
                    "engines where it has them, as much as it can; the loader threads take what it cannot decode and "
                    "share the rest) or auto (the loader threads, the GPU finishing the batch training waits for)")
        ->check(parsed_by([](const std::string& d) { parse_decode_device(d); }))
        ->group(group);
  app->add_flag("--skip-bad", a.skip_bad,
                "image files that cannot be decoded are skipped (each replaced by the next readable one) and listed "
                "at the end, instead of stopping with an error")
      ->group(group);
  const std::string images = "Image files (image folders, packs)";
  app->add_option("--transform", a.transform,
                  "auto (default): plain when every image of both splits has one size smaller than --image-size "
                  "(imagenet's crops would upsample them), else imagenet; imagenet: RandomResizedCrop + flip for "
                  "training, Resize + CenterCrop for evaluation; plain: images at their own size (all alike), with "
                  "--crop-pad and --hflip")
      ->check(parsed_by([](const std::string& t) { parse_transform(t); }))
      ->group(images);
  app->add_option("--image-size", a.image_size,
                  "imagenet transform: side of the square samples, in [1, 4096] (--transform auto takes images all of "
                  "one size smaller than this as they are)")
      ->check(CLI::Range(1, 4096))
      ->group(images);
  app->add_option("--eval-resize", a.eval_resize,
                  "imagenet transform: evaluation resizes the short side to this, then center-crops --image-size")
      ->check(CLI::Range(1, 8192))
      ->group(images);
  app->add_option("--channels", a.channels, "3: RGB; 1: grayscale (luma as PIL's convert('L'))")
      ->check(CLI::IsMember({1, 3}))
      ->group(images);
  app->add_option("--normalize", a.normalize,
                  "auto (ImageNet's mean/std for the imagenet transform in RGB, else the training set's), imagenet "
                  "or dataset")
      ->check(parsed_by([](const std::string& n) { parse_normalize(n); }))
      ->group(images);
  app->add_option("--dct-scaling", a.dct_scaling,
                  "1: decode training crops of JPEGs at 1/2, 1/4 or 1/8 scale when the crop stays at least --image-size "
                  "at that scale (default); 0: always at full scale (evaluation always is)")
      ->check(CLI::Range(0, 1))
      ->type_name("0|1")
      ->group(images);
  app->add_flag("--exif-orientation", a.exif_orientation,
                "rotate JPEGs as their EXIF orientation says (torchvision's loader does not, nor does kiln by "
                "default)")
      ->group(images);
  if (!training) return;
  app->add_option("--crop-scale", a.crop_scale, "imagenet transform: RandomResizedCrop's area range MIN,MAX")
      ->delimiter(',')
      ->expected(2)
      ->group(images);
  app->add_option("--crop-ratio", a.crop_ratio, "imagenet transform: RandomResizedCrop's aspect ratio range MIN,MAX")
      ->delimiter(',')
      ->expected(2)
      ->group(images);
  app->add_option("--crop-pad", a.crop_pad,
                  "random crop after zero padding by this many pixels, >= 0 (IDX, CIFAR-10, --transform plain)")
      ->check(non_negative("use e.g. --crop-pad 4, or 0 for no random crop"))
      ->group(group);
  app->add_flag_callback("--hflip", [&a] { a.hflip = 1; },
                         "random horizontal flips (default: on for the imagenet transform, off otherwise)")
      ->group(group);
  app->add_flag_callback("--no-hflip", [&a] { a.hflip = 0; }, "no random horizontal flips")->group(group);
}

DataOptions data_options(const DataArgs& a) {
  DataOptions o;
  o.format = a.format;
  o.val = a.val;
  o.skip_bad = a.skip_bad;
  o.choose_transform = a.transform == "auto";
  o.hflip_set = a.hflip != -1;
  o.note = [](const std::string& sentence) { fmt::print(stderr, "kiln: {}\n", sentence); };
  ImageTransform& t = o.transform;
  t.kind = parse_transform(a.transform);
  t.size = a.image_size;
  t.eval_resize = a.eval_resize;
  // CLI11 takes one value as well as two here (--crop-scale 1.0): a range needs both ends.
  auto range = [](const std::vector<double>& v, const char* flag, const char* example) {
    if (v.size() != 2)
      fail("{} takes a range, two numbers MIN,MAX; it got {}; use e.g. {} {}", flag, v.size(), flag, example);
  };
  range(a.crop_scale, "--crop-scale", "0.08,1");
  range(a.crop_ratio, "--crop-ratio", "0.75,1.3333");
  t.scale_min = a.crop_scale[0], t.scale_max = a.crop_scale[1];
  t.ratio_min = a.crop_ratio[0], t.ratio_max = a.crop_ratio[1];
  t.channels = a.channels;
  t.normalize = parse_normalize(a.normalize);
  t.dct_scaling = a.dct_scaling == 1;
  t.exif_orientation = a.exif_orientation;
  const bool imagenet = t.kind == ImageTransform::Kind::ImageNet;
  t.augment.hflip = a.hflip == -1 ? imagenet : a.hflip == 1;
  t.augment.pad_crop = a.crop_pad;
  o.augment.hflip = a.hflip == 1;
  o.augment.pad_crop = a.crop_pad;
  return o;
}

DataArgs resolved_data_args(const DataArgs& a, const DataSplits& data) {
  DataArgs r = a;
  if (a.transform == "auto" && (data.format == "imagefolder" || data.format == "packed"))
    r.transform = data.transform.kind == ImageTransform::Kind::Plain ? "plain" : "imagenet";
  return r;
}

int loader_workers(const DataArgs& a, const std::string& format) {
  // The rule of --threads and KILN_THREADS (kiln::max_threads): loader threads beyond it would only
  // take turns on the cores, each with its stack and decode buffers.
  if (const int cap = max_threads(); a.workers > cap) {
    fmt::print(stderr,
               "kiln: --workers {} capped to {}: more loader threads than 4 x the {} cores this process may use "
               "(at least 64) only take turns on them\n", a.workers, cap, available_cores());
    return cap;
  }
  if (a.workers >= 0) return a.workers;
  if (format == "imagefolder" || format == "packed") return std::max(1, available_cores() - 1);
  return 2;
}

std::vector<std::pair<std::string, std::string>> data_recipe(const DataArgs& a, const std::string& format) {
  // Where the data was, for kiln eval without --data: every format, never compared on resume.
  std::pair<std::string, std::string> where{kDataSourceKey, data_source_text(a, format)};
  if (format != "imagefolder" && format != "packed") return {where};
  const DataOptions o = data_options(a);
  const ImageTransform& t = o.transform;
  std::vector<std::pair<std::string, std::string>> r = {{"data_format", format}, {"transform", a.transform},
                                                        {"channels", std::to_string(t.channels)},
                                                        {"normalize", a.normalize}};
  if (t.kind == ImageTransform::Kind::ImageNet) {
    r.emplace_back("image_size", std::to_string(t.size));
    r.emplace_back("eval_resize", std::to_string(t.eval_resize));
    r.emplace_back("crop_scale", number(t.scale_min) + "," + number(t.scale_max));
    r.emplace_back("crop_ratio", number(t.ratio_min) + "," + number(t.ratio_max));
  }
  r.emplace_back("exif_orientation", t.exif_orientation ? "true" : "false");
  r.push_back(std::move(where));
  return r;
}

CLI::Validator parsed_by(std::function<void(const std::string&)> parse) {
  return CLI::Validator(
      [parse = std::move(parse)](std::string& text) -> std::string {
        try {
          parse(text);
        } catch (const Error& e) {
          return e.what();
        }
        return {};
      },
      "", "");
}

}  // namespace kiln::cli

#include "cli/data_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <thread>

#include "cli/data_settings.h"
#include "cli/setting_options.h"
#include "data/dataset_formats.h"
#include "kiln/error.h"
#include "kiln/threads.h"

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

}  // namespace

void add_data_options(CLI::App* app, DataArgs& a, bool training) {
  // Training's alone: augmentation and who decodes (train, data-bench).
  static const std::set<std::string> training_only = {"crop_pad", "decode", "crop_scale", "crop_ratio", "hflip"};
  // How image files become samples; the rest (where the data is, the loader) is "Data".
  static const std::set<std::string> image_files = {"transform", "image_size", "eval_resize",
                                                    "normalize", "dct_scaling", "channels",
                                                    "exif_orientation", "crop_scale", "crop_ratio"};
  for (const Setting& row : data_settings()) {
    const std::string key = row.info.key;
    if (!training && training_only.count(key)) continue;
    add_setting_option(app, row, a)->group(image_files.count(key) ? "Image files (image folders, packs)" : "Data");
  }
  app->get_option("--val")->type_name("DIR");
  app->get_option("--workers")->default_str("auto");  // -1: by the format (loader_workers)
}

DataOptions data_options(const DataArgs& a) {
  DataOptions o;
  o.format = a.format;
  o.val = a.val;
  o.skip_bad = a.skip_bad;
  o.choose_transform = a.transform == "auto";
  o.hflip_set = a.hflip.has_value();
  o.note = [](const std::string& sentence) { fmt::print(stderr, "kiln: {}\n", sentence); };
  ImageTransform& t = o.transform;
  t.kind = parse_transform(a.transform);
  t.size = a.image_size;
  t.eval_resize = a.eval_resize;
  t.scale_min = a.crop_scale[0], t.scale_max = a.crop_scale[1];
  t.ratio_min = a.crop_ratio[0], t.ratio_max = a.crop_ratio[1];
  t.channels = a.channels;
  t.normalize = parse_normalize(a.normalize);
  t.dct_scaling = a.dct_scaling;
  t.exif_orientation = a.exif_orientation;
  t.augment.hflip = a.hflip.value_or(t.kind == ImageTransform::Kind::ImageNet);
  t.augment.pad_crop = a.crop_pad;
  o.augment.hflip = a.hflip.value_or(false);
  o.augment.pad_crop = a.crop_pad;
  return o;
}

DataArgs resolved_data_args(const DataArgs& a, const DataSplits& data) {
  DataArgs r = a;
  if (a.transform == "auto" && reads_image_files(data.format))
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
  if (reads_image_files(format)) return std::max(1, available_cores() - 1);
  return 2;
}

bool reads_image_files(const std::string& format) {
  const DatasetFormat* row = find_dataset_format(format);
  return row && !row->load;
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

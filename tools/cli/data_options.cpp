#include "cli/data_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "cli/data_settings.h"
#include "cli/option_checks.h"
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
  const std::string group = "Data", images = "Image files (image folders, packs)";
  // The rows (cli/data_settings.h); --crop-pad is training's alone.
  for (const Setting& row : data_settings()) {
    const std::string key = row.info.key;
    if (!training && key == "crop_pad") continue;
    const bool image_key = key == "transform" || key == "image_size" || key == "eval_resize" || key == "normalize" ||
                           key == "dct_scaling";
    add_setting_option(app, row, a)->group(image_key ? images : group);
  }
  app->get_option("--val")->type_name("DIR");
  app->get_option("--workers")->default_str("auto");  // -1: by the format (loader_workers)
  // The flags that are no rows (cli/data_settings.h says why).
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
  app->add_option("--channels", a.channels, "3: RGB; 1: grayscale (luma as PIL's convert('L'))")
      ->check(CLI::IsMember({1, 3}))
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
  t.dct_scaling = a.dct_scaling;
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

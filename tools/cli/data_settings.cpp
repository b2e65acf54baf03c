#include "cli/data_settings.h"

#include <string>

#include "data/dataset_formats.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

// --format's choices: "auto", then every format of the registry.
std::vector<std::string> format_choices() {
  std::vector<std::string> names = {"auto"};
  for (const DatasetFormat& f : dataset_formats()) names.push_back(f.name);
  return names;
}

// A setting of the imagenet transform alone: "auto" is imagenet until open_dataset chooses (the
// recipe records the kind chosen), so only plain leaves it unused.
Setting imagenet_only(Setting row) {
  row.applies = [](const void* args) { return static_cast<const DataArgs*>(args)->transform != "plain"; };
  row.decided_by = "transform";
  return row;
}

}  // namespace

const std::vector<Setting>& data_settings() {
  using D = DataArgs;
  // The help of --format names the registry's formats; the row keeps a pointer to it.
  static const std::string format_help = dataset_format_choices("auto (from what --data holds)");
  static const std::vector<Setting> rows = {
      text_setting<D>({.key = "data",
                       .flag = "--data",
                       .alias = "-d",
                       .help = "dataset folder: IDX files, CIFAR-10 batches, an image folder (class subfolders, or "
                               "train/ and val/ holding them) or a kiln pack",
                       .member = "DataArgs::data"},
                      &D::data),
      // The recipe records the format read, never "auto" (data_recipe: the one open_dataset chose).
      text_choice_setting<D>({.key = "data_format",
                              .flag = "--format",
                              .help = format_help.c_str(),
                              .member = "DataArgs::format",
                              .compared_on_resume = true},
                             &D::format, format_choices()),
      text_setting<D>({.key = "val",
                       .flag = "--val",
                       .help = "image folders: the validation folder (default: <data>/val when there is one)",
                       .member = "DataArgs::val"},
                      &D::val),
      count_setting<D>({.key = "workers",
                        .flag = "--workers",
                        .help = "data loader threads, >= 0 (0: load on the training thread; more than 4 x the cores, "
                                "at least 64, are capped to that); default: the cores left after the training thread "
                                "for image files, 2 otherwise",
                        .member = "DataArgs::workers",
                        .fix = "use e.g. --workers 2, or 0 to load batches on the training thread"},
                       &D::workers, {0, kUnbounded}),
      text_choice_setting<D>({.key = "transform",
                              .flag = "--transform",
                              .help = "auto (default): plain when every image of both splits has one size smaller "
                                      "than --image-size (imagenet's crops would upsample them), else imagenet; "
                                      "imagenet: RandomResizedCrop + flip for training, Resize + CenterCrop for "
                                      "evaluation; plain: images at their own size (all alike), with --crop-pad and "
                                      "--hflip",
                              .member = "DataOptions::transform.kind",
                              .compared_on_resume = true,
                              .eval_adopts = true},
                             &D::transform, {"auto", "imagenet", "plain"}),
      imagenet_only(count_setting<D>({.key = "image_size",
                                      .flag = "--image-size",
                                      .help = "imagenet transform: side of the square samples, in [1, 4096] "
                                              "(--transform auto takes images all of one size smaller than this "
                                              "as they are)",
                                      .member = "DataOptions::transform.size",
                                      .compared_on_resume = true,
                                      .eval_adopts = true},
                                     &D::image_size, {1, 4096})),
      imagenet_only(count_setting<D>({.key = "eval_resize",
                                      .flag = "--eval-resize",
                                      .help = "imagenet transform: evaluation resizes the short side to this, "
                                              "then center-crops --image-size",
                                      .member = "DataOptions::transform.eval_resize",
                                      .compared_on_resume = true,
                                      .eval_adopts = true},
                                     &D::eval_resize, {1, 8192})),
      text_choice_setting<D>({.key = "normalize",
                              .flag = "--normalize",
                              .help = "auto (ImageNet's mean/std for the imagenet transform in RGB, else the training "
                                      "set's), imagenet or dataset",
                              .member = "DataOptions::transform.normalize",
                              .compared_on_resume = true},
                             &D::normalize, {"auto", "imagenet", "dataset"}),
      switch_setting<D>({.key = "dct_scaling",
                         .flag = "--dct-scaling",
                         .help = "1: decode training crops of JPEGs at 1/2, 1/4 or 1/8 scale when the crop stays at "
                                 "least --image-size at that scale (default); 0: always at full scale (evaluation "
                                 "always is)",
                         .member = "DataOptions::transform.dct_scaling"},
                        &D::dct_scaling),
      count_setting<D>({.key = "crop_pad",
                        .flag = "--crop-pad",
                        .help = "random crop after zero padding by this many pixels, >= 0 (IDX, CIFAR-10, --transform "
                                "plain)",
                        .member = "TrainOptions::augment.pad_crop",
                        .fix = "use e.g. --crop-pad 4, or 0 for no random crop",
                        .compared_on_resume = true},
                       &D::crop_pad, {0, kUnbounded}),
      text_choice_setting<D>({.key = "decode",
                              .flag = "--decode",
                              .help = "who decodes training JPEGs on a CUDA run: cpu (the loader threads), gpu (nvJPEG, "
                                      "the GPU's JPEG engines where it has them, as much as it can; the loader threads "
                                      "take what it cannot decode and share the rest) or auto (the loader threads, the "
                                      "GPU finishing the batch training waits for)",
                              .member = "TrainOptions::decode",
                              .fix = "use e.g. --decode cpu, or auto (the default)"},
                             &D::decode, {"cpu", "gpu", "auto"}),
      switch_setting<D>({.key = "skip_bad",
                         .flag = "--skip-bad",
                         .help = "image files that cannot be decoded are skipped (each replaced by the next readable "
                                 "one) and listed at the end, instead of stopping with an error",
                         .member = "DataOptions::skip_bad",
                         .flag_only = true},
                        &D::skip_bad),
      // The recipe's channels, exif_orientation, crop_scale and crop_ratio name DataArgs' fields in
      // their fixes, as they always have.
      count_choice_setting<D>({.key = "channels",
                               .flag = "--channels",
                               .help = "3: RGB; 1: grayscale (luma as PIL's convert('L'))",
                               .member = "DataArgs::channels",
                               .compared_on_resume = true,
                               .eval_adopts = true},
                              &D::channels, {1, 3}),
      switch_setting<D>({.key = "exif_orientation",
                         .flag = "--exif-orientation",
                         .help = "rotate JPEGs as their EXIF orientation says (torchvision's loader does not, nor does "
                                 "kiln by default)",
                         .member = "DataArgs::exif_orientation",
                         .compared_on_resume = true,
                         .flag_only = true,
                         .eval_adopts = true},
                        &D::exif_orientation),
      imagenet_only(interval_setting<D>({.key = "crop_scale",
                                         .flag = "--crop-scale",
                                         .help = "imagenet transform: RandomResizedCrop's area range MIN,MAX, as "
                                                 "fractions of the image",
                                         .member = "DataArgs::crop_scale",
                                         .fix = "use e.g. --crop-scale 0.08,1 (the default)",
                                         .compared_on_resume = true},
                                        &D::crop_scale, {0, 1, true, false})),
      imagenet_only(interval_setting<D>({.key = "crop_ratio",
                                         .flag = "--crop-ratio",
                                         .help = "imagenet transform: RandomResizedCrop's aspect ratio (width / "
                                                 "height) range MIN,MAX",
                                         .member = "DataArgs::crop_ratio",
                                         .fix = "use e.g. --crop-ratio 0.75,1.3333 (about the default)",
                                         .compared_on_resume = true},
                                        &D::crop_ratio, {0, kUnbounded, true, false})),
      // The training half of the recipe records the flips the run makes (on or off, as resolved).
      optional_switch_setting<D>({.key = "hflip",
                                  .flag = "--hflip",
                                  .help = "random horizontal flips (default: on for the imagenet transform, off "
                                          "otherwise); --no-hflip: none",
                                  .member = "TrainOptions::augment.hflip",
                                  .compared_on_resume = true,
                                  .flag_pair = true},
                                 &D::hflip),
  };
  return rows;
}

const Setting& data_setting(const char* key) {
  const Setting* row = find_setting(data_settings(), key);
  if (!row) fail("internal: no data setting '{}'", key);
  return *row;
}

}  // namespace kiln::cli

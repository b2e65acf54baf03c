#pragma once
// The data options of `kiln train`, `kiln eval` and `kiln data-bench`: where the data is, its
// format, and how image files become samples (kiln/image_folder.h).
#include <CLI/CLI.hpp>

#include <array>
#include <functional>
#include <optional>
#include <string>

#include "kiln/image_folder.h"

namespace kiln::cli {

// Its fields are set through their rows (cli/data_settings.h), which say what each takes.
struct DataArgs {
  std::string data = "data/digits", format = "auto", val;
  std::string transform = "auto", normalize = "auto";  // transform: auto, imagenet or plain
  int image_size = 224, eval_resize = 256, channels = 3, crop_pad = 0;
  std::array<double, 2> crop_scale{0.08, 1.0}, crop_ratio{3.0 / 4.0, 4.0 / 3.0};  // MIN, MAX
  std::optional<bool> hflip;  // --hflip, --no-hflip; unset: on for the imagenet transform, off otherwise
  bool dct_scaling = true;  // --dct-scaling 0|1
  bool exif_orientation = false, skip_bad = false;
  int workers = -1;      // -1: the cores left after the training thread (image files), else 2
  std::string decode = "auto";  // training images: cpu, gpu (nvJPEG) or auto
};

// Whether `format` (DataSplits::format, a name of data/dataset_formats.h) is read file by file as
// it trains (image folders, packs: DatasetFormat::load is nullptr), its images decoded, transformed
// and augmented by the loader; false for the formats read whole into memory (IDX, CIFAR-10).
bool reads_image_files(const std::string& format);

// A CLI11 check that runs a kiln parse function: its kiln::Error, which names the accepted values,
// is the message.
CLI::Validator parsed_by(std::function<void(const std::string&)> parse);

// The flags of the data rows (cli/data_settings.h) in their --help groups; `training`: those that
// only matter when training (augmentation, who decodes) too.
void add_data_options(CLI::App* app, DataArgs& a, bool training);

// The options as the library takes them (the format still "auto" when not named). --transform
// auto leaves the kind to open_dataset (DataOptions::choose_transform); its notes go to stderr.
DataOptions data_options(const DataArgs& a);

// `a` with --transform auto replaced by the kind open_dataset chose for `data`, so that
// data_options and data_recipe (cli/data_recipe.h) of the result say what the run uses (the
// checkpoint's recipe records the resolved transform: --resume, kiln eval and kiln predict take
// the same).
DataArgs resolved_data_args(const DataArgs& a, const DataSplits& data);

// Loader threads: --workers, or by default the cores left after the training thread for image
// files (decoding is the work) and 2 for in-memory sets. A --workers above kiln::max_threads() is
// capped to it, saying so on stderr.
int loader_workers(const DataArgs& a, const std::string& format);

}  // namespace kiln::cli

// Fuzz target "cli_options": the `kiln` command line's parsing, without running anything. It parses
// with the real app, tools/cli/kiln_app.h's KilnApp (all six subcommands and every check of
// tools/cli/: the range validators of --lr, --seed, --threads ..., the typo hints, train's checks
// between options such as --warmup against --epochs), through KilnApp::parse, the call main() makes
// before it runs a subcommand; KilnApp::run is never called.
// Feeds: the input as argv words separated by NUL bytes (argv[0] "kiln" added); the first 8 words
// also go through each of kiln's parse functions directly.
// Asserts: parsing succeeds or fails with a CLI11 ParseError (the CLI prints it and exits 1-110),
// and the parse functions and validators return or throw kiln::Error only. After a successful parse
// the data options of train, eval and data-bench convert (data_options, data_recipe,
// loader_workers; a kiln::Error is accepted) and, when check_image_transform accepts them, the crop
// boxes they lead to lie inside images of a few sizes (random_resized_crop_box,
// resize_center_crop_box); pack's options are in their ranges.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>

#include "cli/data_recipe.h"
#include "cli/kiln_app.h"
#include "compile/optimizer_family.h"
#include "data/image/crop_geometry.h"
#include "data/image/image_codec.h"
#include "fuzz_support.h"
#include "kiln/data.h"
#include "kiln/dtype.h"
#include "kiln/options.h"
#include "kiln/schedule.h"
#include "kiln/threads.h"
#include "kiln/zoo.h"

namespace kiln::fuzz {
namespace {

void parse_word(const std::string& word) {
  accept_kiln_errors([&] { parse_schedule(word); });
  accept_kiln_errors([&] { parse_decode_device(word); });
  accept_kiln_errors([&] { optimizer_family(word); });
  accept_kiln_errors([&] { parse_precision(word); });
  accept_kiln_errors([&] { parse_device_spec(word); });
  accept_kiln_errors([&] { parse_loss_scale_mode(word); });
  accept_kiln_errors([&] { zoo::by_name(word); });
}

void check_geometry(const ImageTransform& t) {
  if (t.kind != ImageTransform::Kind::ImageNet) return;
  const RandomResizedCropParams params{t.scale_min, t.scale_max, t.ratio_min, t.ratio_max};
  check_random_resized_crop(params);
  // Sizes a header may claim: read_image_info accepts up to kMaxImagePixels (a PNG row of 178956970 pixels).
  constexpr int kLong = int(kMaxImagePixels);
  for (const auto& [w, h] : {std::pair{1, 1}, {3, 1000}, {1000, 3}, {224, 224}, {65500, 2}, {kLong, 1}, {1, kLong}}) {
    for (uint64_t key = 0; key < 3; ++key) {
      const CropBox b = random_resized_crop_box(w, h, params, key);
      KILN_FUZZ_CHECK(b.width > 0 && b.height > 0 && b.x >= 0 && b.y >= 0);
      KILN_FUZZ_CHECK(b.x <= w - b.width && b.y <= h - b.height);
    }
    const ResizeCropBox r = resize_center_crop_box(w, h, t.eval_resize, t.size);
    KILN_FUZZ_CHECK(r.out_width >= 1 && r.out_width <= t.size && r.out_height >= 1 && r.out_height <= t.size);
    KILN_FUZZ_CHECK(r.pad_left >= 0 && r.pad_top >= 0 && r.pad_left + r.out_width <= t.size &&
                    r.pad_top + r.out_height <= t.size);
    KILN_FUZZ_CHECK(std::isfinite(r.x) && std::isfinite(r.width) && r.x >= 0 && r.y >= 0 && r.width > 0 &&
                    r.height > 0 && r.x + r.width <= w + 1e-6 && r.y + r.height <= h + 1e-6);
  }
}

void use_data_args(const cli::DataArgs& a) {
  accept_kiln_errors([&] {
    const DataOptions o = cli::data_options(a);
    for (const char* format : {"idx", "imagefolder", "packed"}) {
      KILN_FUZZ_CHECK(cli::loader_workers(a, format) >= 0);
      cli::data_recipe(a, format);
    }
    check_image_transform(o.transform);
    check_geometry(o.transform);
  });
}

}  // namespace

void cli_options_input(Bytes input) {
  std::vector<std::string> words{"kiln"};
  std::string word;
  for (uint8_t c : input) {
    if (c == 0) {
      words.push_back(std::move(word));
      word.clear();
    } else {
      word += char(c);
    }
  }
  words.push_back(std::move(word));
  if (words.size() > 64) words.resize(64);
  // Each parse function throws for almost every word, and a throw under ASan costs tens of
  // microseconds: the first 8 words go through them (the rest reach them as option values).
  for (size_t i = 1; i < std::min<size_t>(words.size(), 9); ++i) parse_word(words[i]);

  // Built once and reset between inputs (building it, every subcommand's options with their
  // validators, would cost most of an execution under ASan): every input starts from what a fresh
  // `kiln` process sees.
  static cli::KilnApp kiln(threads());
  kiln.reset();
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  try {
    kiln.parse(int(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    KILN_FUZZ_CHECK(e.get_exit_code() != 0 || e.get_name() == "CallForHelp" || e.get_name() == "CallForAllHelp" ||
                    e.get_name() == "CallForVersion" || e.get_name() == "Success");
    return;
  }
  if (kiln.train->parsed()) use_data_args(kiln.train_args.data);
  if (kiln.eval->parsed()) use_data_args(kiln.eval_args.data);
  if (kiln.data_bench->parsed()) use_data_args(kiln.data_bench_args.data);
  if (kiln.pack->parsed()) {
    const cli::PackCommandArgs& p = kiln.pack_args;
    KILN_FUZZ_CHECK(p.quality >= 1 && p.quality <= 100 && p.max_side >= 1);
  }
}

}  // namespace kiln::fuzz

KILN_FUZZ_TARGET(cli_options_input)

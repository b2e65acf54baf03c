#include "cli/bench_settings.h"

#include <string>

namespace kiln::cli {
namespace {

// BenchOptions' rows (the library's struct; bench_settings places them in BenchArgs).
std::vector<Setting> bench_option_settings() {
  using B = BenchOptions;
  return {
      count_setting<B>({.key = "steps",
                        .flag = "--steps",
                        .help = "timed steps, >= 1",
                        .member = "BenchOptions::steps",
                        .fix = "use e.g. --steps 20"},
                       &B::steps, {1, kUnbounded}),
      // bench's JSON has always held it: the steps whose tuning and first-touch costs the timed
      // steps leave out.
      count_setting<B>({.key = "warmup",
                        .flag = "--warmup",
                        .help = "untimed steps before them, >= 0",
                        .member = "BenchOptions::warmup",
                        .fix = "use e.g. --warmup 5",
                        .reported = true},
                       &B::warmup, {0, kUnbounded}),
      count_setting<B>({.key = "seed",
                        .flag = "--seed",
                        .help = "random seed (initialization, synthetic data), 0 to 2^64-1",
                        .member = "BenchOptions::seed",
                        .fix = "use e.g. --seed 1"},
                       &B::seed, {0, kUint64Max}),
      switch_setting<B>({.key = "profile",
                         .flag = "--profile",
                         .help = "then one step op by op, each op timed and set against its floor (FLOPs at "
                                 "--peak-tflops, bytes at --peak-tbps)",
                         .member = "BenchOptions::profile",
                         .flag_only = true},
                        &B::profile),
      real_setting<B>({.key = "peak_tflops",
                       .flag = "--peak-tflops",
                       .help = "tensor-core rate for the floors (default: an H200's fp16)",
                       .member = "BenchOptions::peak_tflops",
                       .fix = "use e.g. --peak-tflops 737"},
                      &B::peak_tflops, {0, kUnbounded, true, false}),
      real_setting<B>({.key = "peak_tbps",
                       .flag = "--peak-tbps",
                       .help = "memory bandwidth in TB/s for the floors (default: an H200's)",
                       .member = "BenchOptions::peak_tbps",
                       .fix = "use e.g. --peak-tbps 4.18"},
                      &B::peak_tbps, {0, kUnbounded, true, false}),
  };
}

}  // namespace

const std::vector<Setting>& bench_settings() {
  static const std::vector<Setting> rows = [] {
    std::vector<Setting> r = settings_within(bench_option_settings(), &BenchArgs::bench);
    r.push_back(text_setting<BenchArgs>({.key = "json",
                                         .flag = "--json",
                                         .help = "append the result as one JSON line to this file",
                                         .member = "BenchArgs::json"},
                                        &BenchArgs::json));
    r.push_back(count_setting<BenchArgs>({.key = "image_size",
                                          .flag = "--image-size",
                                          .help = "side of the square synthetic images; 0 (default): the model's own "
                                                  "input (torchvision's evaluation size: 224 for most, 299 for "
                                                  "inception_v3, 240 for efficientnet_b1, 384 for efficientnet_v2_s)",
                                          .member = "BenchArgs::image_size",
                                          .fix = "use e.g. --image-size 224, or 0 (the default) for the model's",
                                          .reported = true},
                                         &BenchArgs::image_size, {0, 4096}));
    return r;
  }();
  return rows;
}

}  // namespace kiln::cli

#include "cli/data_bench_settings.h"

namespace kiln::cli {

const std::vector<Setting>& data_bench_settings() {
  using A = DataBenchArgs;
  // The ranges are today's bounds of a sane run (a batch of 65536 images is already 10 GB of
  // ImageNet crops); the refusals' fixes are each flag's default, as value_refusal words them.
  static const std::vector<Setting> rows = {
      count_setting<A>({.key = "batch",
                        .flag = "--batch",
                        .alias = "-b",
                        .help = "batch size, >= 1",
                        .member = "DataBenchArgs::batch",
                        .fix = "use e.g. --batch 256 (the default)"},
                       &A::batch, {1, 1 << 16}),
      count_setting<A>({.key = "batches",
                        .flag = "--batches",
                        .help = "timed batches, >= 1",
                        .member = "DataBenchArgs::batches",
                        .fix = "use e.g. --batches 50 (the default)"},
                       &A::batches, {1, 1 << 30}),
      count_setting<A>({.key = "warmup",
                        .flag = "--warmup",
                        .help = "batches before the clock starts, >= 0",
                        .member = "DataBenchArgs::warmup",
                        .fix = "use e.g. --warmup 2 (the default)"},
                       &A::warmup, {0, 1 << 20}),
      text_choice_setting<A>({.key = "split",
                              .flag = "--split",
                              .help = "train (training transform, shuffled) or val (evaluation transform)",
                              .member = "DataBenchArgs::split",
                              .fix = "use e.g. --split train (the default), or val"},
                             &A::split, {"train", "val"}),
      count_setting<A>({.key = "seed",
                        .flag = "--seed",
                        .help = "random seed (shuffle, augmentation), 0 to 2^64-1",
                        .member = "DataBenchArgs::seed",
                        .fix = "use e.g. --seed 1"},
                       &A::seed, {0, kUint64Max}),
      switch_setting<A>({.key = "host_normalize",
                         .flag = "--host-normalize",
                         .help = "batches of normalized floats, as a CPU trainer takes them; default: uint8 pixels, "
                                 "as a GPU trainer takes them (it normalizes on the device)",
                         .member = "DataBenchArgs::host_normalize",
                         .flag_only = true},
                        &A::host_normalize),
      text_setting<A>({.key = "json",
                       .flag = "--json",
                       .help = "append the result as one JSON line to this file",
                       .member = "DataBenchArgs::json"},
                      &A::json),
      text_setting<A>({.key = "dump",
                       .flag = "--dump",
                       .help = "also write the split's first --dump-count samples (uint8 HWC, before normalization) "
                               "to FILE and their names to FILE.names",
                       .member = "DataBenchArgs::dump"},
                      &A::dump),
      count_setting<A>({.key = "dump_count",
                        .flag = "--dump-count",
                        .help = "samples --dump writes, >= 1",
                        .member = "DataBenchArgs::dump_count",
                        .fix = "use e.g. --dump-count 64 (the default)"},
                       &A::dump_count, {1, 1 << 20}),
  };
  return rows;
}

}  // namespace kiln::cli

#pragma once
// `kiln data-bench`: how fast the loader alone turns a dataset into training batches (decode,
// augmentation, normalization), with no model and no device.
#include <CLI/CLI.hpp>

#include <string>

#include "cli/data_options.h"

namespace kiln::cli {

// Its fields with a flag are rows of cli/data_bench_settings.h (epoch has none: every run starts at 0).
struct DataBenchArgs {
  DataArgs data;
  int batch = 256, batches = 50, warmup = 2, epoch = 0;
  std::string split = "train";  // train | val
  uint64_t seed = 1;
  std::string json;  // append one JSON line
  bool host_normalize = false;  // float batches normalized by the workers (a CPU trainer's); else uint8 (a GPU trainer's)
  // --dump FILE: the first dump_count samples of the split, in index order, as raw uint8 HWC
  // (before normalization) into FILE and their names, one a line, into FILE.names: for comparing
  // kiln's decoding and resampling with PIL/torchvision's (bench/pil_compare.py).
  std::string dump;
  int dump_count = 64;
};

CLI::App* add_data_bench_command(CLI::App& app, DataBenchArgs& args);
int run_data_bench(const DataBenchArgs& args);

}  // namespace kiln::cli

#pragma once
// The rows of `kiln bench`'s own options (BenchArgs, cli/bench_command.h): the steps timed and
// before them, the seed, the profiled step and the peaks its floors assume (the library's
// BenchOptions, kiln/bench.h), and the JSON file. Their flags, checks and help come from these
// rows (add_bench_command); the one marked reported (--warmup) goes into bench's JSON under its
// key, as the compile and CUDA rows do.
#include <vector>

#include "cli/bench_command.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over BenchArgs, in the order --help lists them.
const std::vector<Setting>& bench_settings();

}  // namespace kiln::cli

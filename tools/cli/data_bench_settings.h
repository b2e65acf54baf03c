#pragma once
// The rows of `kiln data-bench`'s own options (DataBenchArgs, cli/data_bench_command.h): the
// batches timed and before them, the split, the seed, what the batches hold, the JSON file and the
// sample dump. Their flags, checks and help come from these rows (add_data_bench_command); the
// data's own (--data, the transform, the loader) are data_settings.h's.
#include <vector>

#include "cli/data_bench_command.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over DataBenchArgs, in the order --help lists them.
const std::vector<Setting>& data_bench_settings();

}  // namespace kiln::cli

#pragma once
// The rows of the data-parallel options (DataParallelArgs, cli/data_parallel_options.h): the GPUs
// of this machine, the machines, where rank 0 meets the others and how long the ranks wait. Their
// flags on `kiln train` and `kiln bench` come from these rows (add_data_parallel_options), and so
// do the flags a rank's command line drops (rank_command) and their lines in `kiln settings`.
#include <vector>

#include "cli/data_parallel_options.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over DataParallelArgs, in the order --help lists them: --gpus, --nodes, --node-rank, --master,
// --join-timeout, --rank-timeout (train's only).
const std::vector<Setting>& data_parallel_settings();

// The row of `key` (a kiln::Error, internal, when there is none: the callers name rows that exist).
const Setting& data_parallel_setting(const char* key);

// The rows that start the ranks (--gpus, --nodes, --node-rank, --master): the launcher's own, which
// the ranks' command lines leave out. The timeouts the ranks keep.
bool launches_ranks(const Setting& row);

}  // namespace kiln::cli

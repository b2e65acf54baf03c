#pragma once
// The rows of `kiln plot`'s options (PlotArgs, cli/plot_command.h): the picture written (-o, its
// title and size) and whether it may replace a file. Their flags, checks and help come from these
// rows (add_plot_command); the run file stays a positional, and -o's extension is checked when
// the plot runs (run_plot).
#include <vector>

#include "cli/plot_command.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over PlotArgs, in the order --help lists them.
const std::vector<Setting>& plot_settings();

}  // namespace kiln::cli

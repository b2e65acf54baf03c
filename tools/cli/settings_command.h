#pragma once
// `kiln settings`: every setting with a flag as one markdown table, made from the settings rows
// (compile, training, data, the optimizers', CPU and CUDA): its flag, its field, its variable,
// what it takes, its default on kiln's command line, whether --resume must match it, whether plan
// and bench report it, and what it does. README.md's table of the settings is this output
// (tests/cli/settings_table_cli_test.cpp compares), so it follows the rows.
#include <CLI/CLI.hpp>

#include <string>

namespace kiln::cli {

// The table, header included, one line a row, ending in a newline.
std::string settings_table();

CLI::App* add_settings_command(CLI::App& app);
int run_settings();

}  // namespace kiln::cli

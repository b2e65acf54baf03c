#pragma once
// `kiln plan`: compile a model and print its layers, tensors and memory plan, without training.
#include <CLI/CLI.hpp>

#include "cli/common_options.h"

namespace kiln::cli {

CLI::App* add_plan_command(CLI::App& app, CommonOptions& common);
int run_plan(const CommonOptions& common);

}  // namespace kiln::cli

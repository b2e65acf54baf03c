#pragma once
// `kiln plan`: compile a model and print its layers, tensors and memory plan, without training.
#include <CLI/CLI.hpp>

#include "cli/backend_options.h"
#include "cli/common_options.h"

namespace kiln::cli {

// The CUDA settings, taken as `kiln train` takes them (so that its command line's settings may be
// given); none of them changes what a plan shows.
struct PlanArgs {
  BackendArgs backend;
};

CLI::App* add_plan_command(CLI::App& app, CommonOptions& common, PlanArgs& args);
int run_plan(const CommonOptions& common, const PlanArgs& args);

}  // namespace kiln::cli

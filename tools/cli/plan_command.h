#pragma once
// `kiln plan`: compile a model and print its layers, tensors and memory plan, without training.
#include <CLI/CLI.hpp>

#include "cli/backend_options.h"
#include "cli/common_options.h"

namespace kiln::cli {

// The CUDA settings the plan is compiled with (those that shape it: which ops run on the branch
// stream pair, --branch-streams); the others are taken and change nothing a plan shows.
struct PlanArgs {
  BackendArgs backend;
};

CLI::App* add_plan_command(CLI::App& app, CommonOptions& common, PlanArgs& args);
int run_plan(const CommonOptions& common, const PlanArgs& args);

}  // namespace kiln::cli

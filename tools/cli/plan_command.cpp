#include "cli/plan_command.h"

#include <fmt/format.h>

#include "kiln/memory_plan.h"
#include "kiln/zoo.h"

namespace kiln::cli {

CLI::App* add_plan_command(CLI::App& app, CommonOptions& common) {
  CLI::App* cmd = app.add_subcommand("plan", "compile a model and print its layers, tensors and memory plan");
  add_common_options(cmd, common);
  return cmd;
}

int run_plan(const CommonOptions& o) {
  const Program program = compile(zoo::by_name(o.model, o.classes), compile_options(o));
  verify_memory_plan(program, program.memory);
  fmt::print("{}", format_plan(program, program.memory));
  return 0;
}

}  // namespace kiln::cli

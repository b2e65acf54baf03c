#include "cli/plan_command.h"

#include <fmt/format.h>

#include "cli/model_source.h"
#include "kiln/memory_plan.h"

namespace kiln::cli {

CLI::App* add_plan_command(CLI::App& app, CommonOptions& common, PlanArgs& args) {
  CLI::App* cmd = app.add_subcommand("plan", "compile a model and print its layers, tensors and memory plan");
  add_common_options(cmd, common);
  add_cuda_options(cmd, args.backend);
  return cmd;
}

int run_plan(const CommonOptions& o, const PlanArgs& args) {
  CompileOptions c = compile_options(o);
  c.cuda = args.backend.cuda;
  const ModelSource source = resolve_model(o.model, o.classes);
  print_model_notes(source);
  const Program program = compile(source.blueprint, c);
  verify_memory_plan(program, program.memory);
  fmt::print("{}", format_plan(program, program.memory));
  return 0;
}

}  // namespace kiln::cli

#include "cli/backend_options.h"

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include "cli/option_checks.h"
#include "ir/cpu_option_table.h"
#include "ir/cuda_option_table.h"
#include "kiln/threads.h"

namespace kiln::cli {

// The numbers start as CudaOptions' defaults.
BackendArgs::BackendArgs() {
  const std::vector<CudaOptionField>& fields = cuda_option_fields();
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].type != CudaOptionField::Type::File) numbers.at(i) = cuda_option_number(cuda, fields[i]);
}

// Data loader workers are not counted in --threads: they sleep while the prefetch queue is full
// and build a batch in a small fraction of a step, and while one runs, the pool's other threads
// take the pieces of the thread it delays (a kernel's pieces go to whichever thread is free).
// The flag, its variable, range and help are the row of ir/cpu_option_table.h; its cap is
// kiln::max_threads(), the one rule of set_threads and KILN_THREADS too. The flag has no 0: its
// default is the pool's size already (KILN_THREADS or the cores), shown by --help.
void add_threads_option(CLI::App* app, BackendArgs& a) {
  const CpuOptionField& f = cpu_option_fields().at(0);
  const int cap = f.hi(), cores = available_cores();
  app->add_option(f.flag, a.threads,
                  fmt::format("{}, {} to {}; default: the cores this process may use, or {}", f.help, f.lo, cap,
                              f.env))
      ->check(number_in([&f, cap](double v) { return v >= f.lo && v <= cap; },
                        fmt::format(">= {} and at most {} (4 x the {} cores this process may use, at least 64: more "
                                    "threads than cores only take turns on them)",
                                    f.lo, cap, cores),
                        fmt::format("use e.g. {} {} (the cores this process may use), or 1 for a single thread",
                                    f.flag, cores)));
}

void add_cpu_kernels_option(CLI::App* app, BackendArgs& a) {
  const CpuOptionField& f = cpu_option_fields().at(1);
  app->add_option(f.flag, a.cpu_kernels,
                  fmt::format("{}, {} to {}; default: {} ({})", f.help, f.lo, f.hi(), f.zero, f.env))
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, int>{{"onednn", 1}, {"reference", 2}, {"onednn-bf16", 3}}))
      ->check(number_in([&f](double v) { return v >= f.lo && v <= f.hi(); },
                        "onednn (1), reference (2) or onednn-bf16 (3)", fmt::format("use e.g. {} reference", f.flag)))
      ->type_name("onednn|reference|onednn-bf16");
}

CpuOptions cpu_options(const BackendArgs& a) {
  CpuOptions c;
  c.threads = a.threads;
  c.kernels = a.cpu_kernels;
  return c;
}

// The KILN_* environment variables override these (README.md, GPU). Ranges are checked here, so a
// bad value is an error naming the flag.
void add_cuda_options(CLI::App* app, BackendArgs& a) {
  const std::string group = "CUDA backend (--device cuda; KILN_* variables override these)";
  const std::vector<CudaOptionField>& fields = cuda_option_fields();
  CLI::Option* tune = nullptr;
  CLI::Option* tune_plans = nullptr;
  CLI::Option* tune_budget = nullptr;
  size_t tune_row = 0, tune_plans_row = 0, tune_budget_row = 0;
  for (size_t i = 0; i < fields.size(); ++i) {
    const CudaOptionField& f = fields[i];
    const std::string help = fmt::format("{} [{}]", f.help, f.env);
    CLI::Option* option = nullptr;
    if (f.type == CudaOptionField::Type::File) {
      option = app->add_option(f.flag, a.cuda.*f.file_field, help)->type_name("FILE");
    } else {
      option = app->add_option(f.flag, a.numbers.at(i), help)
                   ->check(CLI::Range(f.lo, f.hi))
                   ->type_name(f.type == CudaOptionField::Type::Switch ? "0|1" : "N");
    }
    option->group(group);
    if (f.switch_field == &CudaOptions::tune) tune = option, tune_row = i;
    if (f.count_field == &CudaOptions::tune_plans) tune_plans = option, tune_plans_row = i;
    if (f.count_field == &CudaOptions::tune_budget_ms) tune_budget = option, tune_budget_row = i;
  }
  // The short form, kept from before --cudnn-tune existed: --no-cudnn-tune is --cudnn-tune 0.
  CLI::Option* no_tune = app->add_flag_callback(
      "--no-cudnn-tune",
      [&a, tune_row] { a.numbers.at(tune_row) = 0; },
      "--cudnn-tune 0: keep cuDNN's first usable plan (or the plan cache's) instead of timing the plans");
  no_tune->group(group)->excludes(tune);
  tune_plans->excludes(no_tune);
  // The two ways to tune by name: the bounded default, or every plan of every graph.
  CLI::Option* mode = app->add_option_function<std::string>(
      "--tune",
      [&a, tune_plans_row, tune_budget_row](const std::string& how) {
        if (how == "exhaustive") a.numbers.at(tune_plans_row) = 0, a.numbers.at(tune_budget_row) = 0;
      },
      "bounded: the first --tune-plans plans within --tune-budget-ms per graph (default); exhaustive: time every "
      "plan of every graph (about 5 s a graph at batch 256 on an H200), as --tune-plans 0 --tune-budget-ms 0; "
      "a bounded choice in the plan cache is then tuned again");
  mode->check(CLI::IsMember({"bounded", "exhaustive"}))->type_name("bounded|exhaustive")->group(group);
  mode->excludes(no_tune)->excludes(tune_plans)->excludes(tune_budget);
}

CudaOptions cuda_options(const BackendArgs& a) {
  CudaOptions c = a.cuda;
  const std::vector<CudaOptionField>& fields = cuda_option_fields();
  for (size_t i = 0; i < fields.size(); ++i)
    if (fields[i].type != CudaOptionField::Type::File) set_cuda_option_number(c, fields[i], a.numbers.at(i));
  return c;
}

}  // namespace kiln::cli

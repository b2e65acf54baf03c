#include "cli/backend_options.h"

#include <fmt/format.h>

#include <map>
#include <string>

#include "cli/option_checks.h"
#include "cli/setting_options.h"
#include "kiln/threads.h"
#include "settings/cpu_settings.h"
#include "settings/cuda_settings.h"

namespace kiln::cli {

// Data loader workers are not counted in --threads: they sleep while the prefetch queue is full
// and build a batch in a small fraction of a step, and while one runs, the pool's other threads
// take the pieces of the thread it delays (a kernel's pieces go to whichever thread is free).
// The flag, its variable, range and help are the row's; its cap is kiln::max_threads(), the one
// rule of set_threads and KILN_THREADS too. The flag has no 0: its default is the pool's size
// already (KILN_THREADS or the cores), shown by --help.
void add_threads_option(CLI::App* app, BackendArgs& a) {
  const Setting& row = cpu_setting("threads");
  const int lo = int(row.range.lo), cap = int(row.range.hi), cores = available_cores();
  app->add_option(row.info.flag, a.cpu.threads,
                  fmt::format("{}, {} to {}; default: the cores this process may use, or {}", row.info.help, lo, cap,
                              row.info.env))
      ->check(number_in([range = row.range](double v) { return range.contains(v); },
                        fmt::format(">= {} and at most {} (4 x the {} cores this process may use, at least 64: more "
                                    "threads than cores only take turns on them)",
                                    lo, cap, cores),
                        fmt::format("use e.g. {} {} (the cores this process may use), or 1 for a single thread",
                                    row.info.flag, cores)));
}

// The kernels by name as well as by number (core/cpu_kernels.h's names).
void add_cpu_kernels_option(CLI::App* app, BackendArgs& a) {
  const Setting& row = cpu_setting("kernels");
  app->add_option(row.info.flag, a.cpu.kernels,
                  fmt::format("{}, {} to {}; default: {} ({})", row.info.help, row.range.lo, row.range.hi,
                              row.info.zero, row.info.env))
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, int>{{"onednn", 1}, {"reference", 2}, {"onednn-bf16", 3}}))
      ->check(number_in([range = row.range](double v) { return range.contains(v); },
                        "onednn (1), reference (2) or onednn-bf16 (3)",
                        fmt::format("use e.g. {} reference", row.info.flag)))
      ->type_name("onednn|reference|onednn-bf16");
}

// The KILN_* environment variables override these (README.md, GPU). Ranges are checked here, so a
// bad value is an error naming the flag.
void add_cuda_options(CLI::App* app, BackendArgs& a) {
  const std::string group = "CUDA backend (--device cuda; KILN_* variables override these)";
  add_setting_options(app, cuda_settings(), a.cuda, group);
  for (const Setting& row : cuda_settings())  // the text rows are files
    if (row.type == SettingType::Text) app->get_option(row.info.flag)->type_name("FILE");
  CLI::Option* tune = app->get_option(cuda_setting("tune").info.flag);
  CLI::Option* tune_plans = app->get_option(cuda_setting("tune_plans").info.flag);
  CLI::Option* tune_budget = app->get_option(cuda_setting("tune_budget_ms").info.flag);
  // The short form, kept from before --cudnn-tune existed: --no-cudnn-tune is --cudnn-tune 0.
  CLI::Option* no_tune = app->add_flag_callback(
      "--no-cudnn-tune", [&a] { a.cuda.tune = false; },
      "--cudnn-tune 0: keep cuDNN's first usable plan (or the plan cache's) instead of timing the plans");
  no_tune->group(group)->excludes(tune);
  tune_plans->excludes(no_tune);
  // The two ways to tune by name: the bounded default, or every plan of every graph.
  CLI::Option* mode = app->add_option_function<std::string>(
      "--tune",
      [&a](const std::string& how) {
        if (how == "exhaustive") a.cuda.tune_plans = 0, a.cuda.tune_budget_ms = 0;
      },
      "bounded: the first --tune-plans plans within --tune-budget-ms per graph (default); exhaustive: time every "
      "plan of every graph (about 5 s a graph at batch 256 on an H200), as --tune-plans 0 --tune-budget-ms 0; "
      "a bounded choice in the plan cache is then tuned again");
  mode->check(CLI::IsMember({"bounded", "exhaustive"}))->type_name("bounded|exhaustive")->group(group);
  mode->excludes(no_tune)->excludes(tune_plans)->excludes(tune_budget);
}

}  // namespace kiln::cli

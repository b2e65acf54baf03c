#pragma once
// The whole `kiln` command line: the CLI11 app with its subcommands (plan, train, bench,
// data-bench, eval, pack, export, predict, plot, settings) and --version, parsed with kiln's own errors (typo hints, the checks
// between train's options), and the run of the subcommand given. tools/kiln.cpp's main() and the
// cli_options fuzz target (fuzz/) both use it, so what the fuzzer parses is what users type.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "cli/bench_command.h"
#include "cli/common_options.h"
#include "cli/data_bench_command.h"
#include "cli/eval_command.h"
#include "cli/export_command.h"
#include "cli/pack_command.h"
#include "cli/plan_command.h"
#include "cli/plot_command.h"
#include "cli/predict_command.h"
#include "cli/settings_command.h"
#include "cli/train_command.h"

namespace kiln::cli {

class KilnApp {
 public:
  // `default_threads`: --threads when not given (kiln::threads(), KILN_THREADS or the cores
  // available), shown by --help.
  explicit KilnApp(int default_threads);
  // The options are bound to this object's members: it stays where it was made.
  KilnApp(const KilnApp&) = delete;
  KilnApp& operator=(const KilnApp&) = delete;

  // Parses argv into the members below; throws CLI::ParseError (main passes it to app.exit, which
  // prints it and gives the exit code): an unknown subcommand or option with the nearest known one,
  // a value out of range, or train options that do not go together (check_train_options).
  void parse(int argc, const char* const* argv);

  // Runs the subcommand parse() found and returns the exit code; a kiln::Error is printed as
  // "kiln: error: ..." and returns 2.
  int run();

  // Back to the state before any parse: the results cleared and every option at its default, so
  // one app can parse many command lines as fresh processes would (building it again costs far
  // more; the cli_options fuzz target parses one per input).
  void reset();

  CLI::App app{"kiln: a static-graph CNN training engine with a fused Conv+BN+ReLU operator"};
  CommonOptions common;  // plan, train and bench
  PlanArgs plan_args;
  TrainArgs train_args;
  BenchArgs bench_args;
  DataBenchArgs data_bench_args;
  EvalArgs eval_args;
  PackCommandArgs pack_args;
  ExportArgs export_args;
  PredictArgs predict_args;
  PlotArgs plot_args;
  CLI::App *plan = nullptr, *train = nullptr, *bench = nullptr, *data_bench = nullptr, *eval = nullptr,
           *pack = nullptr;
  CLI::App* exporter = nullptr;  // `kiln export` (export is a C++ keyword)
  CLI::App* predict = nullptr;
  CLI::App* plot = nullptr;
  CLI::App* settings = nullptr;  // `kiln settings`: the settings table

 private:
  // The subcommand parse() found, or nullptr before a parse.
  CLI::App* parsed_subcommand() const;

  int default_threads_;
  std::vector<std::string> argv_;  // of the last parse: the command line ranks of a launch run again
};

}  // namespace kiln::cli

#include "cli/kiln_app.h"

#include <fmt/format.h>

#include <functional>
#include <stdexcept>
#include <string>

#include "cli/plan_command.h"
#include "cli/train_run.h"
#include "cli/typo_hints.h"
#include "cli/value_refusal.h"
#include "cli/version.h"
#include "kiln/error.h"

namespace kiln::cli {

KilnApp::KilnApp(int default_threads) : default_threads_(default_threads) {
  // Before the options are added: --help shows the defaults they capture.
  train_args.backend.cpu.threads = bench_args.backend.cpu.threads = default_threads;
  app.set_version_flag("--version", std::function<std::string()>(version_text), "print the version; exit");
  app.require_subcommand(1);
  // For every option (subcommands copy these when made): --help shows the default, and a later
  // value overrides an earlier one, so `scripts/demo.sh --epochs 2` overrides the script's own.
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  plan = add_plan_command(app, common, plan_args);
  train = add_train_command(app, common, train_args);
  bench = add_bench_command(app, common, bench_args);
  data_bench = add_data_bench_command(app, data_bench_args);
  eval = add_eval_command(app, eval_args);
  pack = add_pack_command(app, pack_args);
  exporter = add_export_command(app, export_args);
  predict = add_predict_command(app, predict_args);
  plot = add_plot_command(app, plot_args);
  settings = add_settings_command(app);
}

void KilnApp::reset() {
  app.clear();
  // T() rather than T{}: from the aggregate initialization GCC 12 takes a string in CudaOptions for
  // uninitialized (a false -Wmaybe-uninitialized).
  common = CommonOptions();
  train_args = TrainArgs();
  train_args.backend.cpu.threads = default_threads_;
  plan_args = PlanArgs();
  bench_args = BenchArgs();
  bench_args.backend.cpu.threads = default_threads_;
  data_bench_args = DataBenchArgs();
  eval_args = EvalArgs();
  pack_args = PackCommandArgs();
  export_args = ExportArgs();
  predict_args = PredictArgs();
  plot_args = PlotArgs();
}

CLI::App* KilnApp::parsed_subcommand() const {
  for (CLI::App* sub : {plan, train, bench, data_bench, eval, pack, predict, exporter, plot, settings})
    if (sub->parsed()) return sub;
  return nullptr;
}

namespace {

// The word holding a number too long for 64 bits (its value after '=' when it has one), or a
// placeholder when none does.
std::string out_of_range_word(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    std::string value = word.substr(word.find('=') == std::string::npos ? 0 : word.find('=') + 1);
    if (!value.empty() && (value[0] == '-' || value[0] == '+')) value.erase(0, 1);
    if (value.size() > 18 && value.find_first_not_of("0123456789") == std::string::npos) return "'" + word + "'";
  }
  return "a value on the command line";
}

// Called in a catch block: CLI11's refusal of a number in kiln's words (value_refusal), other
// refusals as CLI11 made them.
[[noreturn]] void rethrow_value_refusal(const CLI::App& app, const CLI::ParseError& e) {
  const std::string message = value_refusal(app, e);
  if (message.empty()) throw;
  throw CLI::ValidationError(message, e.get_exit_code());
}

}  // namespace

void KilnApp::parse(int argc, const char* const* argv) {
  argv_.assign(argv, argv + argc);
  check_subcommand(app, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    const CLI::App* sub = parsed_subcommand();
    const std::string message = sub ? unknown_options_message(*sub, sub->remaining()) : std::string();
    if (message.empty()) throw;
    throw CLI::ExtrasError(message, CLI::ExitCodes::ExtrasError);
  } catch (const CLI::ConversionError& e) {
    rethrow_value_refusal(app, e);
  } catch (const CLI::ValidationError& e) {
    rethrow_value_refusal(app, e);
  } catch (const std::out_of_range&) {
    // CLI11 2.1 reads a flag's value (`--no-nesterov=N`) with std::stoll and lets a number past
    // 64 bits escape as std::out_of_range rather than a ParseError.
    throw CLI::ConversionError(fmt::format("{}: a number too large for any option; a flag takes true, false, 1 or 0",
                                           out_of_range_word(argc, argv)),
                               CLI::ExitCodes::ConversionError);
  }
  if (train->parsed()) check_train_options(train_args, common.model);
}

int KilnApp::run() {
  try {
    if (plan->parsed()) return run_plan(common, plan_args);
    // --gpus: this process starts the ranks, which run the same command line without it.
    if (bench->parsed())
      if (auto launched = launch_ranks_if_asked(bench_args.parallel, argv_)) return *launched;
    if (train->parsed())
      if (auto launched = launch_ranks_if_asked(train_args.parallel, argv_)) return *launched;
    if (bench->parsed()) return run_bench(common, bench_args);
    if (data_bench->parsed()) return run_data_bench(data_bench_args);
    if (eval->parsed()) return run_eval(eval_args, *eval);
    if (pack->parsed()) return run_pack(pack_args);
    if (exporter->parsed()) return run_export(export_args);
    if (predict->parsed()) return run_predict(predict_args);
    if (plot->parsed()) return run_plot(plot_args);
    if (settings->parsed()) return run_settings();
    return run_train(common, train_args);
  } catch (const Error& e) {
    fmt::print(stderr, "\nkiln: error: {}\n", e.what());
    return 2;
  }
}

}  // namespace kiln::cli

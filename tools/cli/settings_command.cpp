#include "cli/settings_command.h"

#include <fmt/format.h>

#include <set>
#include <vector>

#include "cli/bench_settings.h"
#include "cli/common_options.h"
#include "cli/common_settings.h"
#include "cli/data_parallel_settings.h"
#include "cli/data_bench_settings.h"
#include "cli/data_settings.h"
#include "cli/eval_settings.h"
#include "cli/export_settings.h"
#include "cli/pack_settings.h"
#include "cli/plot_settings.h"
#include "cli/predict_settings.h"
#include "cli/train_command.h"
#include "cli/train_run_settings.h"
#include "compile/loss_scale_def.h"
#include "compile/optimizer_family.h"
#include "compile/optimizer_settings.h"
#include "kiln/threads.h"
#include "settings/compile_settings.h"
#include "settings/cpu_settings.h"
#include "settings/cuda_settings.h"
#include "train/train_settings.h"

namespace kiln::cli {
namespace {

// A table cell: its '|' escaped.
std::string cell(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

std::string flag_text(const Setting& row) {
  std::string flag = row.info.flag;
  if (row.type == SettingType::Switch && row.info.flag_pair) return fmt::format("`{}`, `--no-{}`", flag, flag.substr(2));
  if (row.info.alias) return fmt::format("`{}`, `{}`", flag, row.info.alias);
  return fmt::format("`{}`", flag);
}

// What the row takes. A range whose top is the machine's thread cap (kiln::max_threads()) is said
// in words, so that the table is the same on every machine.
std::string takes_text(const Setting& row) {
  if (row.info.takes) return row.info.takes;
  switch (row.type) {
    case SettingType::Switch: return row.info.flag_pair || row.info.flag_only ? "a flag" : "0 or 1";
    case SettingType::Count:
      if (!row.choices.empty()) return fmt::format("{}", fmt::join(row.choices, ", "));
      [[fallthrough]];
    case SettingType::Real: {
      std::string range = row.range.text(row.type);
      if (row.type == SettingType::Count && row.range.hi == double(max_threads()))
        range = fmt::format("from {} to 4 x the cores (at least 64)", row.range.lo);
      if (row.type == SettingType::Count && row.range.hi == kUint64Max)
        range = fmt::format("from {} to 2^64-1", row.range.lo);
      return row.info.zero ? range + ", or 0" : range;
    }
    case SettingType::Choice: return fmt::format("{}", fmt::join(row.choices, ", "));
    case SettingType::Text: return "text";
    case SettingType::Interval: return setting_interval_words(row.range);
  }
  return "";
}

std::string line(const Setting& row, const std::string& default_text) {
  // A Switch's as its flag's 1 or 0; an optional switch's "auto" as it is.
  const bool on_off = row.type == SettingType::Switch && (default_text == "true" || default_text == "false");
  const std::string shown = on_off ? (default_text == "true" ? "1" : "0") : default_text;
  return fmt::format("| {} | `{}` | {} | {} | {} | {} | {} | {} |\n", flag_text(row), row.info.member,
                     row.info.env ? fmt::format("`{}`", row.info.env) : std::string(), cell(takes_text(row)),
                     shown.empty() ? std::string() : fmt::format("`{}`", cell(shown)),
                     row.info.compared_on_resume ? "must match" : "", row.info.reported ? "yes" : "",
                     cell(row.info.help));
}

template <class Owner>
void add_rows(std::string& out, const std::vector<Setting>& rows, const Owner& defaults) {
  for (const Setting& row : rows)
    if (row.info.flag) out += line(row, row.read(&defaults));
}

}  // namespace

std::string settings_table() {
  std::string out =
      "| flag | field | variable | takes | default | `--resume` | reported | what it does |\n"
      "| --- | --- | --- | --- | --- | --- | --- | --- |\n";
  const CommonOptions common;
  const TrainArgs train;
  add_rows(out, common_settings(), common);
  add_rows(out, compile_settings(), common.compile);
  add_rows(out, train_settings(), train.train);
  add_rows(out, {optimizer_choice()}, OptimizerConfig());
  // The optimizers': a key once, with the first family's (by name) row, and its default there but
  // where kiln train has its own (its weight decay); the recipe compares the chosen optimizer's.
  std::set<std::string> keys;
  for (const OptimizerFamily* family : all_optimizer_families())
    for (const Setting& row : family->settings()) {
      if (!row.info.flag || !keys.insert(row.info.key).second) continue;
      const auto own = train.optimizer.defaults.find(row.info.key);
      out += line(row, own == train.optimizer.defaults.end() ? setting_default_text(row)
                                                              : setting_number_text(float(own->second)));
    }
  add_rows(out, loss_scale_settings(), common.compile);
  add_rows(out, data_settings(), DataArgs());
  add_rows(out, data_parallel_settings(), DataParallelArgs());
  add_rows(out, train_run_settings(), train);
  add_rows(out, bench_settings(), BenchArgs());
  add_rows(out, data_bench_settings(), DataBenchArgs());
  add_rows(out, eval_settings(), EvalArgs());
  add_rows(out, predict_settings(), PredictArgs());
  add_rows(out, export_settings(), ExportArgs());
  add_rows(out, pack_settings(), PackCommandArgs());
  add_rows(out, plot_settings(), PlotArgs());
  add_rows(out, cpu_settings(), CpuOptions());
  add_rows(out, cuda_settings(), CudaOptions());
  return out;
}

CLI::App* add_settings_command(CLI::App& app) {
  return app.add_subcommand("settings",
                            "print every setting with a flag as a markdown table: flag, field, variable, what it "
                            "takes, default, whether --resume must match it, whether plan and bench report it");
}

int run_settings() {
  fmt::print("{}", settings_table());
  return 0;
}

}  // namespace kiln::cli

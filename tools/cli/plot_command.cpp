#include "cli/plot_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <filesystem>
#include <span>

#include "cli/named_setting_options.h"
#include "cli/plot/chart_png/chart_png.h"
#include "cli/plot/run_log.h"
#include "cli/plot/training_chart.h"
#include "cli/plot_settings.h"
#include "core/file_io.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

std::string extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return ext;
}

}  // namespace

CLI::App* add_plot_command(CLI::App& app, PlotArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "plot", "draw a run's kiln train --json lines (loss, accuracy, learning rate per epoch) as SVG or PNG");
  cmd->add_option("run", a.run, "the JSON lines kiln train --json wrote")->required()->type_name("RUN.jsonl");
  // Its flags (cli/plot_settings.h): --output/-o (required), --title, --width, --height, --overwrite.
  add_named_setting_options(cmd, plot_settings(), a, {{"output", "FILE"}});
  cmd->get_option("--output")->required();
  return cmd;
}

int run_plot(const PlotArgs& a) {
  const std::string ext = extension(a.output);
  if (ext != ".svg" && ext != ".png")
    fail("-o '{}': kiln plot writes .svg or .png files; name the output curves.svg or curves.png", a.output);
  std::error_code ec;
  if (!a.overwrite && std::filesystem::exists(a.output, ec))
    fail("'{}' already exists: kiln plot would replace it. Give --overwrite to replace it, or another -o path; '{}' "
         "is left as it was", a.output, a.output);
  const RunLog run = read_run_log(a.run);
  const Chart chart = training_chart(run, a.title.empty() ? std::filesystem::path(a.run).filename().string() : a.title,
                                     a.width, a.height);
  if (ext == ".svg") {
    const std::string svg = chart_svg(chart);
    write_file_atomic(a.output, {std::as_bytes(std::span(svg.data(), svg.size()))});
  } else {
    const std::vector<uint8_t> png = chart_png(chart);
    write_file_atomic(a.output, {std::as_bytes(std::span(png.data(), png.size()))});
  }
  const EpochLine &first = run.epochs.front(), &last = run.epochs.back();
  fmt::print("kiln plot: epochs {}-{} of {} (lines {}-{}{}) -> {}\n", first.epoch, last.epoch, a.run, first.line,
             last.line, run.runs > 1 ? fmt::format(", the last of {} runs in the file", run.runs) : std::string(),
             a.output);
  return 0;
}

}  // namespace kiln::cli

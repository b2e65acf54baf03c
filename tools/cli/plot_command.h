#pragma once
// `kiln plot RUN.jsonl -o curves.svg|curves.png`: the loss, accuracy and learning rate of a run's
// `kiln train --json` lines against the epochs, drawn as SVG, or as PNG: the
// same SVG rasterized by librsvg (kiln_plot; a build without librsvg refuses PNG, naming the package).
#include <CLI/CLI.hpp>

#include <string>

namespace kiln::cli {

// Its fields but the run file (a positional) are rows of cli/plot_settings.h, which give them their flags.
struct PlotArgs {
  std::string run, output, title;
  int width = 800, height = 900;
  bool overwrite = false;
};

CLI::App* add_plot_command(CLI::App& app, PlotArgs& args);
int run_plot(const PlotArgs& args);

}  // namespace kiln::cli

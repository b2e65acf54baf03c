#pragma once
// `kiln plot -o curves.png`: the chart's SVG (chart_svg) rasterized, text included, into an RGB PNG
// of the chart's size. Not in kiln_engine: the rasterizer (librsvg and cairo, with GLib, Pango and
// fontconfig behind them) lives with the rest of the chart in kiln plot's library, kiln_plot
// (cmake/chart_png.cmake), which the CLI links.
#include <cstdint>
#include <vector>

#include "cli/plot/training_chart.h"

namespace kiln {

// The PNG file's bytes. Built without librsvg, kiln::Error naming the Debian package that brings it
// (librsvg2-dev) and the SVG output that needs nothing.
std::vector<uint8_t> chart_png(const Chart& chart);

}  // namespace kiln

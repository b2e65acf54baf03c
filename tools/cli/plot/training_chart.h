#pragma once
// `kiln plot`'s chart of a training run: panels stacked top to bottom (loss; train and test
// accuracy; learning rate), each a frame with its own axis ranges, against the epochs. The layout is
// computed once and drawn as SVG; a PNG is that SVG rasterized (chart_png/chart_png.h, a library of
// its own), so both show the same picture.
#include <cstdint>
#include <string>
#include <vector>

#include "cli/plot/run_log.h"

namespace kiln {

struct ChartSeries {
  std::string id, label;  // id: the --json key ("train_loss"); label: the legend's text
  uint8_t rgb[3] = {0, 0, 0};
  std::vector<double> x, y;  // epochs and values; epochs whose value is null are left out
};

struct ChartPanel {
  std::string id, title;
  double left = 0, top = 0, width = 0, height = 0;  // the plot area, in pixels
  // The axes' ranges: x from the first to the last epoch; y the values' range padded by 5% of it on
  // both sides, so no curve runs along the frame. A single value gets a range around it.
  double x_min = 0, x_max = 1, y_min = 0, y_max = 1;
  std::vector<double> x_ticks, y_ticks;  // at round numbers inside the ranges
  std::vector<ChartSeries> series;
  double px(double x) const { return left + (x - x_min) / (x_max - x_min) * width; }
  double py(double y) const { return top + (y_max - y) / (y_max - y_min) * height; }
};

struct Chart {
  int width = 0, height = 0;
  std::string title;
  std::vector<ChartPanel> panels;
};

// The run's panels; the learning-rate panel only when the lines hold lr, the test accuracy only
// when they hold one.
Chart training_chart(const RunLog& run, const std::string& title, int width = 800, int height = 900);

// The chart as an SVG document: each panel a <g class="panel" id="..."> holding its plot area
// (<rect class="plot-area" data-x-min=... data-y-max=...>), tick labels, and one
// <polyline class="series" data-series="<id>"> per series with a point per epoch.
std::string chart_svg(const Chart& chart);

}  // namespace kiln

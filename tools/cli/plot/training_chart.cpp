#include "cli/plot/training_chart.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>

#include "kiln/error.h"

namespace kiln {
namespace {

// Round numbers (1, 2 or 5 times a power of ten apart) inside [lo, hi], about `wanted` of them.
std::vector<double> ticks_between(double lo, double hi, int wanted, double min_step = 0) {
  const double raw = (hi - lo) / std::max(wanted, 1);
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  step = std::max(step, min_step);
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

void set_ranges(ChartPanel& p) {
  double lo = INFINITY, hi = -INFINITY, first = INFINITY, last = -INFINITY;
  for (const ChartSeries& s : p.series) {
    for (double v : s.y) lo = std::min(lo, v), hi = std::max(hi, v);
    for (double x : s.x) first = std::min(first, x), last = std::max(last, x);
  }
  const double pad = 0.05 * (hi > lo ? hi - lo : std::max(std::abs(hi), 1e-3));
  p.y_min = lo - pad, p.y_max = hi + pad;
  p.x_min = first, p.x_max = last;
  if (last <= first) p.x_min = first - 0.5, p.x_max = first + 0.5;
  p.y_ticks = ticks_between(p.y_min, p.y_max, 5);
  p.x_ticks = ticks_between(p.x_min, p.x_max, 10, 1.0);
}

ChartSeries series(const RunLog& run, const char* id, const char* label, std::array<uint8_t, 3> rgb,
                   std::optional<double> (*value)(const EpochLine&)) {
  ChartSeries s;
  s.id = id, s.label = label;
  std::copy(rgb.begin(), rgb.end(), s.rgb);
  for (const EpochLine& e : run.epochs)
    if (const std::optional<double> v = value(e); v && std::isfinite(*v)) s.x.push_back(e.epoch), s.y.push_back(*v);
  return s;
}

}  // namespace

Chart training_chart(const RunLog& run, const std::string& title, int width, int height) {
  if (width < 200 || height < 200) fail("a chart of {}x{} pixels is too small to draw; use at least 200x200", width, height);
  Chart chart;
  chart.width = width, chart.height = height, chart.title = title;
  std::vector<ChartPanel> panels(3);
  panels[0].id = "loss", panels[0].title = "training loss";
  panels[0].series.push_back(series(run, "train_loss", "train loss", {0x1f, 0x77, 0xb4},
                                    [](const EpochLine& e) -> std::optional<double> { return e.train_loss; }));
  panels[1].id = "accuracy", panels[1].title = "accuracy (top-1)";
  panels[1].series.push_back(series(run, "train_accuracy", "train", {0x1f, 0x77, 0xb4},
                                    [](const EpochLine& e) -> std::optional<double> { return e.train_accuracy; }));
  panels[1].series.push_back(series(run, "test_accuracy", "test", {0xd6, 0x27, 0x28},
                                    [](const EpochLine& e) { return e.test_accuracy; }));
  panels[2].id = "lr", panels[2].title = "learning rate";
  panels[2].series.push_back(series(run, "lr", "learning rate", {0x2c, 0xa0, 0x2c},
                                    [](const EpochLine& e) { return e.lr; }));
  for (ChartPanel& p : panels) {
    p.series.erase(std::remove_if(p.series.begin(), p.series.end(), [](const ChartSeries& s) { return s.x.empty(); }),
                   p.series.end());
    if (!p.series.empty()) chart.panels.push_back(std::move(p));
  }
  // Room for the title above, tick labels left of and below each plot area, and the legend.
  const double top = 40, bottom = 45, left = 80, right = 30, gap = 50;
  const double each = (height - top - bottom - gap * double(chart.panels.size() - 1)) / double(chart.panels.size());
  for (size_t i = 0; i < chart.panels.size(); ++i) {
    ChartPanel& p = chart.panels[i];
    p.left = left, p.width = width - left - right;
    p.top = top + double(i) * (each + gap), p.height = each;
    set_ranges(p);
  }
  return chart;
}

}  // namespace kiln

// training_chart.h's chart rasterized: straight lines between pixel centres (Bresenham's walk),
// widened by a square brush, on a white RGB canvas, then libpng through the image codec. No text:
// the SVG carries the labels.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "data/image/image_codec.h"
#include "train/training_chart.h"

namespace kiln {
namespace {

struct Canvas {
  int width, height;
  std::vector<uint8_t> rgb;
  Canvas(int w, int h) : width(w), height(h), rgb(size_t(w) * size_t(h) * 3, 255) {}

  void dot(int x, int y, const uint8_t color[3], int radius) {
    for (int yy = std::max(0, y - radius); yy <= std::min(height - 1, y + radius); ++yy)
      for (int xx = std::max(0, x - radius); xx <= std::min(width - 1, x + radius); ++xx)
        std::copy(color, color + 3, rgb.begin() + (ptrdiff_t(yy) * width + xx) * 3);
  }

  // From (x0, y0) to (x1, y1), both ends included; every pixel the brush covers gets `color`.
  void line(double fx0, double fy0, double fx1, double fy1, const uint8_t color[3], int radius = 0) {
    int x0 = int(std::lround(fx0)), y0 = int(std::lround(fy0));
    const int x1 = int(std::lround(fx1)), y1 = int(std::lround(fy1));
    const int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    while (true) {
      dot(x0, y0, color, radius);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
};

constexpr uint8_t kGrid[3] = {0xe0, 0xe0, 0xe0};
constexpr uint8_t kFrame[3] = {0x80, 0x80, 0x80};

}  // namespace

std::vector<uint8_t> chart_png(const Chart& chart) {
  Canvas c(chart.width, chart.height);
  for (const ChartPanel& p : chart.panels) {
    const double right = p.left + p.width, bottom = p.top + p.height;
    for (double t : p.y_ticks) c.line(p.left, p.py(t), right, p.py(t), kGrid);
    for (double t : p.x_ticks) c.line(p.px(t), p.top, p.px(t), bottom, kGrid);
    c.line(p.left, p.top, right, p.top, kFrame);
    c.line(right, p.top, right, bottom, kFrame);
    c.line(right, bottom, p.left, bottom, kFrame);
    c.line(p.left, bottom, p.left, p.top, kFrame);
    for (const ChartSeries& s : p.series) {
      for (size_t i = 0; i + 1 < s.x.size(); ++i)
        c.line(p.px(s.x[i]), p.py(s.y[i]), p.px(s.x[i + 1]), p.py(s.y[i + 1]), s.rgb, 1);
      if (s.x.size() == 1) c.dot(int(std::lround(p.px(s.x[0]))), int(std::lround(p.py(s.y[0]))), s.rgb, 2);
    }
  }
  return encode_png(c.rgb.data(), c.width, c.height, 3);
}

}  // namespace kiln

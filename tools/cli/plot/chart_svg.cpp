// training_chart.h's chart as SVG text: the frames, grid and tick labels, the curves as polylines
// with a point per epoch, a legend per panel and the title.
#include <fmt/format.h>

#include "cli/plot/training_chart.h"

namespace kiln {
namespace {

std::string color(const uint8_t rgb[3]) { return fmt::format("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2]); }

// Text for SVG: the five characters XML reserves, escaped.
std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

void panel_svg(const ChartPanel& p, std::string& out) {
  const double right = p.left + p.width, bottom = p.top + p.height;
  out += fmt::format("<g class=\"panel\" id=\"{}\">\n", escaped(p.id));
  for (double t : p.y_ticks) {
    const double y = p.py(t);
    out += fmt::format("<line x1=\"{:.3f}\" y1=\"{:.3f}\" x2=\"{:.3f}\" y2=\"{:.3f}\" stroke=\"#e0e0e0\"/>\n", p.left, y,
                       right, y);
    out += fmt::format("<text x=\"{:.3f}\" y=\"{:.3f}\" text-anchor=\"end\" dominant-baseline=\"middle\">{:g}</text>\n",
                       p.left - 6, y, t);
  }
  for (double t : p.x_ticks) {
    const double x = p.px(t);
    out += fmt::format("<line x1=\"{:.3f}\" y1=\"{:.3f}\" x2=\"{:.3f}\" y2=\"{:.3f}\" stroke=\"#e0e0e0\"/>\n", x, p.top, x,
                       bottom);
    out += fmt::format("<text x=\"{:.3f}\" y=\"{:.3f}\" text-anchor=\"middle\">{:g}</text>\n", x, bottom + 16, t);
  }
  out += fmt::format(
      "<rect class=\"plot-area\" x=\"{:.3f}\" y=\"{:.3f}\" width=\"{:.3f}\" height=\"{:.3f}\" fill=\"none\" "
      "stroke=\"#808080\" data-x-min=\"{:.17g}\" data-x-max=\"{:.17g}\" data-y-min=\"{:.17g}\" data-y-max=\"{:.17g}\"/>\n",
      p.left, p.top, p.width, p.height, p.x_min, p.x_max, p.y_min, p.y_max);
  out += fmt::format("<text x=\"{:.3f}\" y=\"{:.3f}\" font-size=\"14\">{}</text>\n", p.left, p.top - 8,
                     escaped(p.title));
  double legend_x = right;
  for (auto s = p.series.rbegin(); s != p.series.rend(); ++s) {  // right-aligned, in order
    out += fmt::format("<text x=\"{:.3f}\" y=\"{:.3f}\" text-anchor=\"end\" fill=\"{}\">{}</text>\n", legend_x,
                       p.top - 8, color(s->rgb), escaped(s->label));
    legend_x -= 12 + 7.0 * double(s->label.size());
  }
  for (const ChartSeries& s : p.series) {
    std::string points;
    for (size_t i = 0; i < s.x.size(); ++i)
      points += fmt::format("{}{:.3f},{:.3f}", i ? " " : "", p.px(s.x[i]), p.py(s.y[i]));
    out += fmt::format("<polyline class=\"series\" data-series=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" "
                       "stroke-linejoin=\"round\" points=\"{}\"/>\n",
                       escaped(s.id), color(s.rgb), points);
  }
  out += fmt::format("<text x=\"{:.3f}\" y=\"{:.3f}\" text-anchor=\"middle\">epoch</text>\n", p.left + p.width / 2,
                     bottom + 32);
  out += "</g>\n";
}

}  // namespace

std::string chart_svg(const Chart& chart) {
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n",
      chart.width, chart.height);
  out += fmt::format("<text x=\"{:.3f}\" y=\"22\" text-anchor=\"middle\" font-size=\"16\">{}</text>\n",
                     chart.width / 2.0, escaped(chart.title));
  for (const ChartPanel& p : chart.panels) panel_svg(p, out);
  out += "</svg>\n";
  return out;
}

}  // namespace kiln

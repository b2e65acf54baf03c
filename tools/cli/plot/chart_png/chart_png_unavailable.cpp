// chart_png in a build without librsvg (cmake/chart_png.cmake found no librsvg-2.0 through pkg-config,
// or KILN_WITH_RSVG=OFF): refused, naming what to install. The SVG chart needs nothing.
#include "cli/plot/chart_png/chart_png.h"
#include "kiln/error.h"

namespace kiln {

std::vector<uint8_t> chart_png(const Chart& chart) {
  fail("this kiln was built without librsvg, which draws PNG charts ({}x{} asked): install Debian's librsvg2-dev "
       "(scripts/setup.sh does) and build kiln again, or write the chart as SVG (-o curves.svg)",
       chart.width, chart.height);
}

}  // namespace kiln

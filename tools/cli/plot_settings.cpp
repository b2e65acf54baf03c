#include "cli/plot_settings.h"

namespace kiln::cli {

const std::vector<Setting>& plot_settings() {
  using A = PlotArgs;
  // The picture's sides keep the range the hand-written flags had, 200 to 8000 pixels.
  static const std::vector<Setting> rows = {
      text_setting<A>({.key = "output",
                       .flag = "--output",
                       .alias = "-o",
                       .help = "the picture to write: .svg, or .png (the same picture rasterized)",
                       .member = "PlotArgs::output"},
                      &A::output),
      text_setting<A>({.key = "title",
                       .flag = "--title",
                       .help = "the chart's title; default: the run file's name",
                       .member = "PlotArgs::title"},
                      &A::title),
      count_setting<A>({.key = "width",
                        .flag = "--width",
                        .help = "picture width in pixels",
                        .member = "PlotArgs::width",
                        .fix = "use e.g. --width 800 (the default)"},
                       &A::width, {200, 8000}),
      count_setting<A>({.key = "height",
                        .flag = "--height",
                        .help = "picture height in pixels",
                        .member = "PlotArgs::height",
                        .fix = "use e.g. --height 900 (the default)"},
                       &A::height, {200, 8000}),
      switch_setting<A>({.key = "overwrite",
                         .flag = "--overwrite",
                         .help = "replace the --output file when it exists",
                         .member = "PlotArgs::overwrite",
                         .flag_only = true},
                        &A::overwrite),
  };
  return rows;
}

}  // namespace kiln::cli

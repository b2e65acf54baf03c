# `kiln plot -o curves.png` rasterizes the chart's SVG (src/train/chart_svg.cpp) with librsvg and cairo:
# Debian's librsvg2-dev (scripts/setup.sh installs it), found through pkg-config. They bring GLib, Pango
# and fontconfig along, so they stay out of kiln_engine, which every library user links: the rasterizer
# is a small library of its own, kiln_chart_png, linked by the CLI. Where librsvg is missing (or
# KILN_WITH_RSVG=OFF) the same library holds chart_png_unavailable.cpp instead, whose chart_png refuses
# the PNG naming the package to install; the rest of kiln builds and runs as before.
option(KILN_WITH_RSVG "Draw kiln plot's PNG charts with librsvg when it is found" ON)
set(KILN_RSVG_FOUND OFF)
if(KILN_WITH_RSVG)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    # 2.46: rsvg_handle_render_document.
    pkg_check_modules(KILN_RSVG QUIET IMPORTED_TARGET librsvg-2.0>=2.46 cairo)
  endif()
endif()
if(KILN_RSVG_FOUND)
  message(STATUS "kiln: PNG charts through librsvg ${KILN_RSVG_librsvg-2.0_VERSION}")
  add_library(kiln_chart_png STATIC src/train/chart_png/chart_png_rsvg.cpp)
  target_link_libraries(kiln_chart_png PUBLIC kiln_engine PRIVATE PkgConfig::KILN_RSVG)
else()
  if(KILN_WITH_RSVG)
    message(STATUS "kiln: PNG charts off (no librsvg-2.0 >= 2.46 and cairo through pkg-config: install librsvg2-dev)")
  else()
    message(STATUS "kiln: PNG charts off (KILN_WITH_RSVG=OFF)")
  endif()
  add_library(kiln_chart_png STATIC src/train/chart_png/chart_png_unavailable.cpp)
  target_link_libraries(kiln_chart_png PUBLIC kiln_engine)
endif()
target_link_libraries(kiln_cli PRIVATE kiln_chart_png)
# The plot test checks the PNG's text where it can be drawn, the refusal where it cannot.
if(TARGET kiln_test_cli)
  target_compile_definitions(kiln_test_cli PRIVATE KILN_PLOT_PNG=$<BOOL:${KILN_RSVG_FOUND}>)
endif()

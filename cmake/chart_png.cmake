# `kiln plot` (tools/cli/plot_command.cpp) draws its chart with the pieces in tools/cli/plot/: the run
# log read back (run_log), the chart's layout (training_chart) and its SVG (chart_svg.cpp), all in the
# library kiln_plot, which the CLI links and kiln_engine does not (only the tool draws charts).
# `kiln plot -o curves.png` rasterizes that SVG with librsvg and cairo (chart_png/): Debian's
# librsvg2-dev (scripts/setup.sh installs it), found through pkg-config. They bring GLib, Pango and
# fontconfig along, so they stay out of every library a user links. Where librsvg is missing (or
# KILN_WITH_RSVG=OFF) kiln_plot holds chart_png_unavailable.cpp instead, whose chart_png refuses the
# PNG naming the package to install; the rest of kiln builds and runs as before.
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
  set(KILN_CHART_PNG_SRC tools/cli/plot/chart_png/chart_png_rsvg.cpp)
else()
  if(KILN_WITH_RSVG)
    message(STATUS "kiln: PNG charts off (no librsvg-2.0 >= 2.46 and cairo through pkg-config: install librsvg2-dev)")
  else()
    message(STATUS "kiln: PNG charts off (KILN_WITH_RSVG=OFF)")
  endif()
  set(KILN_CHART_PNG_SRC tools/cli/plot/chart_png/chart_png_unavailable.cpp)
endif()
add_library(kiln_plot STATIC tools/cli/plot/run_log.cpp tools/cli/plot/training_chart.cpp
            tools/cli/plot/chart_svg.cpp ${KILN_CHART_PNG_SRC})
target_include_directories(kiln_plot PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/tools)
target_link_libraries(kiln_plot PUBLIC kiln_engine PRIVATE nlohmann_json::nlohmann_json)
if(KILN_RSVG_FOUND)
  target_link_libraries(kiln_plot PRIVATE PkgConfig::KILN_RSVG)
endif()
target_link_libraries(kiln_cli PRIVATE kiln_plot)
# The plot test checks the PNG's text where it can be drawn, the refusal where it cannot.
if(TARGET kiln_test_cli)
  target_compile_definitions(kiln_test_cli PRIVATE KILN_PLOT_PNG=$<BOOL:${KILN_RSVG_FOUND}>)
endif()

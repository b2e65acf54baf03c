// The chart's SVG drawn by librsvg onto a cairo image surface, then encoded by kiln's own PNG writer
// (image_codec.h) as RGB: the PNG shows exactly what the SVG shows, text in the system's sans-serif
// font (fontconfig's choice, DejaVu Sans on Debian).
#include <cairo.h>
#include <librsvg/rsvg.h>

#include <memory>
#include <string>

#include "cli/plot/chart_png/chart_png.h"
#include "data/image/image_codec.h"
#include "kiln/error.h"

namespace kiln {
namespace {

struct GObjectUnref {
  void operator()(gpointer object) const { g_object_unref(object); }
};
struct SurfaceDestroy {
  void operator()(cairo_surface_t* surface) const { cairo_surface_destroy(surface); }
};
struct ContextDestroy {
  void operator()(cairo_t* context) const { cairo_destroy(context); }
};

// GLib's error text, freed.
std::string message_of(GError* error) {
  std::string text = error ? error->message : "no reason given";
  if (error) g_error_free(error);
  return text;
}

}  // namespace

std::vector<uint8_t> chart_png(const Chart& chart) {
  const std::string svg = chart_svg(chart);
  GError* error = nullptr;
  std::unique_ptr<RsvgHandle, GObjectUnref> handle(
      rsvg_handle_new_from_data(reinterpret_cast<const guint8*>(svg.data()), svg.size(), &error));
  if (!handle) fail("the chart's SVG could not be read by librsvg: {}", message_of(error));

  // RGB24: one 32-bit word per pixel, 0x00RRGGBB in the machine's byte order, rows `stride` bytes apart.
  std::unique_ptr<cairo_surface_t, SurfaceDestroy> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, chart.width, chart.height));
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS)
    fail("a {}x{} picture could not be made for the chart: {}", chart.width, chart.height,
         cairo_status_to_string(cairo_surface_status(surface.get())));
  std::unique_ptr<cairo_t, ContextDestroy> context(cairo_create(surface.get()));
  cairo_set_source_rgb(context.get(), 1, 1, 1);  // a new surface is black; the SVG's own ground is white too
  cairo_paint(context.get());
  const RsvgRectangle viewport{0, 0, double(chart.width), double(chart.height)};
  if (!rsvg_handle_render_document(handle.get(), context.get(), &viewport, &error))
    fail("librsvg could not draw the chart: {}", message_of(error));
  cairo_surface_flush(surface.get());

  const unsigned char* data = cairo_image_surface_get_data(surface.get());
  const int stride = cairo_image_surface_get_stride(surface.get());
  std::vector<uint8_t> rgb(size_t(chart.width) * size_t(chart.height) * 3);
  for (int y = 0; y < chart.height; ++y) {
    const auto* row = reinterpret_cast<const uint32_t*>(data + ptrdiff_t(y) * stride);
    for (int x = 0; x < chart.width; ++x) {
      uint8_t* out = &rgb[(size_t(y) * size_t(chart.width) + size_t(x)) * 3];
      out[0] = uint8_t(row[x] >> 16), out[1] = uint8_t(row[x] >> 8), out[2] = uint8_t(row[x]);
    }
  }
  return encode_png(rgb.data(), chart.width, chart.height, 3);
}

}  // namespace kiln

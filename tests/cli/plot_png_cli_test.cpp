// `kiln plot -o curves.png` draws the chart's text: the title, each panel's title and legend, every
// tick label and the axis names, at the places the SVG of the same run puts them (every <text> of
// the SVG is looked for in the PNG). The text-less PNG of kiln before librsvg was white there. A
// build without librsvg refuses the PNG instead, naming the package to install.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/image/image_codec.h"
#include "support/kiln_cli.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::kiln;
using testing::Result;
using testing::TempDir;

// Four epochs of `kiln train --json` lines, written by hand: the plot needs no training.
std::string write_run(const TempDir& dir) {
  const std::string path = dir.file("run.jsonl");
  std::ofstream out(path);
  const double loss[] = {2.1, 1.2, 0.7, 0.5}, train[] = {0.3, 0.6, 0.8, 0.9}, test[] = {0.35, 0.62, 0.79, 0.88},
               lr[] = {0.05, 0.04, 0.02, 0.005};
  for (int e = 0; e < 4; ++e)
    out << "{\"epoch\": " << e + 1 << ", \"train_loss\": " << loss[e] << ", \"train_accuracy\": " << train[e]
        << ", \"test_accuracy\": " << test[e] << ", \"lr\": " << lr[e] << "}\n";
  return path;
}

// The value of attribute `name` in the tag text `tag`; `fallback` when absent.
std::string attribute(const std::string& tag, const std::string& name, const std::string& fallback = "") {
  const std::string key = " " + name + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string::npos) return fallback;
  const size_t from = at + key.size();
  return tag.substr(from, tag.find('"', from) - from);
}

struct SvgText {
  double x = 0, y = 0, size = 12;
  std::string anchor, baseline, text;
  int rgb[3] = {0, 0, 0};
};

// Every <text> element of the SVG kiln plot writes (one a line, its attributes and its content).
std::vector<SvgText> texts_of(const std::string& svg) {
  std::vector<SvgText> out;
  for (size_t at = svg.find("<text "); at != std::string::npos; at = svg.find("<text ", at + 1)) {
    const size_t tag_end = svg.find('>', at);
    const std::string tag = svg.substr(at, tag_end - at + 1);
    SvgText t;
    t.x = std::stod(attribute(tag, "x")), t.y = std::stod(attribute(tag, "y"));
    t.size = std::stod(attribute(tag, "font-size", "12"));
    t.anchor = attribute(tag, "text-anchor", "start");
    t.baseline = attribute(tag, "dominant-baseline", "alphabetic");
    t.text = svg.substr(tag_end + 1, svg.find("</text>", tag_end) - tag_end - 1);
    const std::string fill = attribute(tag, "fill", "#000000");
    for (int c = 0; c < 3; ++c) t.rgb[c] = std::stoi(fill.substr(1 + 2 * c, 2), nullptr, 16);
    out.push_back(t);
  }
  return out;
}

// A pixel of the text's colour as drawn over white: white + a * (colour - white) for a coverage a of
// at least one half, each channel within a rounding margin. Black text: every channel under 128.
bool is_ink(const uint8_t* p, const int rgb[3]) {
  int k = 0;
  for (int c = 1; c < 3; ++c)
    if (rgb[c] < rgb[k]) k = c;
  const double a = (255.0 - p[k]) / (255.0 - rgb[k]);
  if (a < 0.5) return false;
  for (int c = 0; c < 3; ++c)
    if (std::abs(p[c] - (255.0 - std::min(a, 1.0) * (255.0 - rgb[c]))) > 24) return false;
  return true;
}

struct Ink {
  int pixels = 0, x0 = 1 << 30, x1 = -1;  // count and horizontal extent, in pixels
};

// The ink of the text's colour inside the box its string can fill: glyphs at most 0.75 em wide, from
// the anchor leftwards ("end"), centred on it ("middle") or rightwards ("start"); from one em above the
// baseline to 0.3 em below it (a "middle" baseline: 0.7 em either side).
Ink ink_of(const DecodedImage& image, const SvgText& t) {
  const double wide = 0.75 * t.size * double(t.text.size());
  double left = t.x - 1, right = t.x + wide;
  if (t.anchor == "end") left = t.x - wide, right = t.x + 1;
  if (t.anchor == "middle") left = t.x - wide / 2, right = t.x + wide / 2;
  double top = t.y - t.size, bottom = t.y + 0.3 * t.size;
  if (t.baseline == "middle") top = t.y - 0.7 * t.size, bottom = t.y + 0.7 * t.size;
  Ink ink;
  for (int y = std::max(0, int(top)); y < std::min(image.height, int(std::ceil(bottom))); ++y)
    for (int x = std::max(0, int(left)); x < std::min(image.width, int(std::ceil(right))); ++x)
      if (is_ink(&image.pixels[(size_t(y) * size_t(image.width) + size_t(x)) * 3], t.rgb)) {
        ++ink.pixels;
        ink.x0 = std::min(ink.x0, x), ink.x1 = std::max(ink.x1, x);
      }
  return ink;
}

#if KILN_PLOT_PNG

TEST(PlotPngCli, EveryTextOfTheSvgIsDrawnWhereTheSvgPutsIt) {
  TempDir dir;
  const std::string run = write_run(dir), svg_path = dir.file("curves.svg"), png_path = dir.file("curves.png");
  const std::string args = run + " --title 'digits recipe' --width 900 --height 700 -o ";
  ASSERT_EQ(kiln("plot " + args + svg_path).rc, 0);
  const Result plotted = kiln("plot " + args + png_path);
  ASSERT_EQ(plotted.rc, 0) << plotted.output;
  testing::expect_contains(plotted, {"epochs 1-4", png_path}, "plot -o curves.png");

  const std::vector<uint8_t> png = testing::read_bytes(png_path);
  const DecodedImage image = decode_image(png.data(), png.size(), png_path);
  ASSERT_EQ(image.width, 900);
  ASSERT_EQ(image.height, 700);
  ASSERT_EQ(image.channels, 3);

  const std::vector<SvgText> texts = texts_of(testing::read_text(svg_path));
  // The title, and per panel (loss, accuracy, learning rate): its title, legend (1, 2 and 1 entries),
  // "epoch", 4 epoch ticks and its value ticks.
  ASSERT_GE(texts.size(), 1u + 3 * (1 + 1 + 4 + 3) + 1);
  std::vector<std::string> seen;
  for (const SvgText& t : texts) {
    seen.push_back(t.text);
    const Ink ink = ink_of(image, t);
    int glyphs = 0;
    for (char c : t.text) glyphs += c != ' ';
    const std::string what = "'" + t.text + "' at (" + std::to_string(t.x) + ", " + std::to_string(t.y) + ")";
    // Each glyph draws pixels of the text's colour (at 12 px 14 or more here; the text-less PNG none).
    EXPECT_GE(ink.pixels, 6 * glyphs) << what << ": too little ink in its place";
    if (ink.pixels == 0) continue;
    // A string of n glyphs spans at least 0.3 em each (a "1" or "." less, so only together).
    EXPECT_GE(ink.x1 - ink.x0 + 1, 0.3 * t.size * glyphs - 4) << what << ": drawn narrower than its text";
    // Aligned as the SVG anchors it.
    const double edge = t.anchor == "end" ? ink.x1 + 1 : t.anchor == "start" ? ink.x0 : (ink.x0 + ink.x1 + 1) / 2.0;
    EXPECT_NEAR(edge, t.x, 3) << what << ": its " << t.anchor << " is not at the SVG's x";
  }
  for (const char* text : {"digits recipe", "training loss", "train loss", "accuracy (top-1)", "train", "test",
                           "learning rate", "epoch", "1", "4"})
    EXPECT_NE(std::find(seen.begin(), seen.end(), text), seen.end()) << "the SVG has no text '" << text << "'";

  // Away from text, frames and curves the picture is white: the 20 pixels right of the title.
  const SvgText& title = texts.front();
  ASSERT_EQ(title.text, "digits recipe");
  const int right_of_title = int(ink_of(image, title).x1) + 8;
  for (int y = 4; y < 26; ++y)
    for (int x = right_of_title; x < right_of_title + 20; ++x)
      ASSERT_EQ(image.pixels[(size_t(y) * 900 + size_t(x)) * 3], 255) << "not white at (" << x << ", " << y << ")";
}

#else

TEST(PlotPngCli, ABuildWithoutLibrsvgRefusesPngNamingThePackage) {
  TempDir dir;
  const std::string run = write_run(dir), png_path = dir.file("curves.png");
  const Result refused = kiln("plot " + run + " -o " + png_path);
  EXPECT_EQ(refused.rc, 2) << refused.output;
  testing::expect_contains(refused, {"librsvg", "librsvg2-dev", "-o curves.svg"}, "plot -o curves.png");
  EXPECT_FALSE(fs::exists(png_path));
  ASSERT_EQ(kiln("plot " + run + " -o " + dir.file("curves.svg")).rc, 0);  // the SVG needs nothing
}

#endif

}  // namespace
}  // namespace kiln

// `kiln train --tensorboard DIR` read back by TensorBoard's own reader (the tensorboard package in
// the CPU suite's Python, KILN_PYTHON) and compared with the same run's --json lines; and `kiln plot`
// drawing such a run as SVG and PNG, both read back and checked against the run's values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/image/image_codec.h"
#include "support/kiln_cli.h"
#include "support/program_fixture.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::kiln;
using testing::Result;
using testing::TempDir;

// A short digits run (1,024 training images: 16 steps of 64 an epoch) with --json and the extra
// arguments; its JSON lines.
std::vector<nlohmann::json> train_digits(const TempDir& dir, const std::string& extra, Result& run) {
  const std::string digits = testing::shared_digits_dir();
  if (!fs::exists(digits + "/t10k-images-idx3-ubyte")) {
    ADD_FAILURE() << "no digits at " << digits << ": run scripts/setup.sh";
    return {};
  }
  const std::string data = dir.file("digits");
  if (!fs::exists(data)) testing::write_first_digits(digits, data, 1024, 256);
  const std::string json = dir.file("run.jsonl");
  fs::remove(json);
  run = kiln("train --device cpu --model digits_cnn --epochs 2 --batch 64 --workers 1 --data " + data + " --json " +
             json + " " + extra);
  std::vector<nlohmann::json> lines;
  std::ifstream in(json);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The stdout of a command (stderr goes to `dir`/stderr.txt, shown on failure).
std::string stdout_of(const std::string& command, const TempDir& dir, int& rc) {
  const std::string err = dir.file("stderr.txt");
  FILE* pipe = popen((command + " 2>'" + err + "'").c_str(), "r");
  std::string out;
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  rc = pclose(pipe);
  if (rc != 0) out += "\nstderr:\n" + testing::read_text(err);
  return out;
}

// What TensorBoard's EventAccumulator reads from `folder` (tests/cli/read_tensorboard.py).
nlohmann::json read_with_tensorboard(const std::string& folder, const TempDir& dir) {
  if (!fs::exists(KILN_PYTHON)) {
    ADD_FAILURE() << KILN_PYTHON << " is missing: the TensorBoard test reads the event files with the tensorboard "
                  << "package of the CPU suite's Python; run scripts/setup.sh, which makes it";
    return {};
  }
  int rc = -1;
  const std::string out = stdout_of(fmt::format("'{}' '{}/tests/cli/read_tensorboard.py' '{}'", KILN_PYTHON,
                                                KILN_SOURCE_DIR, folder),
                                    dir, rc);
  EXPECT_EQ(rc, 0) << out;
  if (rc != 0) return {};
  return nlohmann::json::parse(out);
}

// Every per-epoch scalar is the --json line's value (as the float TensorBoard stores), at step =
// the epoch; the per-read losses average, weighted by their steps, to the epoch's loss; a second run
// into the folder adds a file and leaves the first as it was; a file given as the folder is refused.
TEST(TensorBoardCli, EventsReadBackByTensorBoardMatchTheJsonLines) {
  TempDir dir;
  const std::string tb = dir.file("tb");
  Result run;
  const std::vector<nlohmann::json> lines = train_digits(dir, "--tensorboard " + tb, run);
  ASSERT_EQ(run.rc, 0) << run.output;
  ASSERT_EQ(lines.size(), 2u);
  testing::expect_contains(run, {"kiln: TensorBoard events go to " + tb + "/events.out.tfevents."}, "train");
  const nlohmann::json events = read_with_tensorboard(tb, dir);
  ASSERT_FALSE(events.is_null());
  EXPECT_EQ(events["file_version"].get<double>(), 2.0);
  ASSERT_EQ(events["files"].size(), 1u);
  const std::string file = events["files"][0];
  EXPECT_EQ(file.rfind("events.out.tfevents.", 0), 0u) << file;

  const nlohmann::json& scalars = events["scalars"];
  const std::vector<std::pair<std::string, std::string>> per_epoch = {
      {"train/loss", "train_loss"},         {"train/accuracy", "train_accuracy"}, {"test/accuracy", "test_accuracy"},
      {"test/top5", "test_top5_accuracy"},  {"lr", "lr"},                         {"images_per_second", "images_per_second"}};
  for (const auto& [tag, key] : per_epoch) {
    ASSERT_TRUE(scalars.contains(tag)) << tag << " missing: " << scalars.dump();
    ASSERT_EQ(scalars[tag].size(), lines.size()) << tag;
    for (size_t e = 0; e < lines.size(); ++e) {
      EXPECT_EQ(scalars[tag][e][0].get<int>(), int(e) + 1) << tag;
      EXPECT_FLOAT_EQ(scalars[tag][e][1].get<float>(), float(lines[e][key].get<double>())) << tag << " epoch " << e + 1;
    }
  }
  EXPECT_FALSE(scalars.contains("loss_scale")) << "an fp32 run has no loss scale";
  EXPECT_GT(lines[0]["lr"].get<double>(), lines[1]["lr"].get<double>());  // cosine decay

  // train/step_loss: at increasing optimizer steps, the last of each epoch at its end (16 steps).
  ASSERT_TRUE(scalars.contains("train/step_loss"));
  const nlohmann::json& steps = scalars["train/step_loss"];
  ASSERT_GE(steps.size(), 4u);
  int64_t previous = 0;
  double weighted = 0;
  size_t epoch = 0;
  for (const nlohmann::json& s : steps) {
    const int64_t step = s[0].get<int64_t>();
    ASSERT_GT(step, previous);
    ASSERT_LE(step, int64_t(16 * (epoch + 1)));
    weighted += s[1].get<double>() * double(step - previous);
    previous = step;
    if (step == int64_t(16 * (epoch + 1))) {
      EXPECT_NEAR(weighted / 16, lines[epoch]["train_loss"].get<double>(), 1e-5) << "epoch " << epoch + 1;
      weighted = 0;
      ++epoch;
    }
  }
  EXPECT_EQ(epoch, 2u);
  EXPECT_EQ(previous, 32);

  // A second run into the same folder: a new file beside the first, which keeps its bytes.
  const std::vector<uint8_t> first = testing::read_bytes(tb + "/" + file);
  Result again;
  ASSERT_EQ(train_digits(dir, "--epochs 1 --tensorboard " + tb, again).size(), 1u);
  ASSERT_EQ(again.rc, 0) << again.output;
  const nlohmann::json both = read_with_tensorboard(tb, dir);
  ASSERT_EQ(both["files"].size(), 2u) << both.dump();
  EXPECT_EQ(testing::read_bytes(tb + "/" + file), first);

  // A file where the folder should be: refused before any work, the file untouched.
  const std::string not_a_folder = dir.file("notes.txt");
  testing::write_bytes(not_a_folder, {'k', 'e', 'e', 'p'});
  Result refused;
  train_digits(dir, "--tensorboard " + not_a_folder, refused);
  EXPECT_EQ(refused.rc, 2) << refused.output;
  testing::expect_contains(refused, {not_a_folder, "is a file, not a folder"}, "train --tensorboard FILE");
  EXPECT_EQ(refused.output.find("kiln: training"), std::string::npos) << refused.output;
  EXPECT_EQ(testing::read_text(not_a_folder), "keep");
}

// The value of attribute `name` in the tag text `tag`; "" when absent.
std::string attribute(const std::string& tag, const std::string& name) {
  const std::string key = " " + name + "=\"";
  const size_t at = tag.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size();
  return tag.substr(from, tag.find('"', from) - from);
}

// Every `<element ...>` tag of `text`, whole.
std::vector<std::string> tags(const std::string& text, const std::string& element) {
  std::vector<std::string> out;
  for (size_t at = text.find("<" + element + " "); at != std::string::npos; at = text.find("<" + element + " ", at + 1))
    out.push_back(text.substr(at, text.find('>', at) - at + 1));
  return out;
}

struct SvgPanel {
  double left = 0, top = 0, width = 0, height = 0, x_min = 0, x_max = 0, y_min = 0, y_max = 0;
  std::map<std::string, std::vector<std::pair<double, double>>> series;  // data-series -> points
  std::map<std::string, std::string> stroke;
};

std::map<std::string, SvgPanel> panels_of(const std::string& svg) {
  std::map<std::string, SvgPanel> panels;
  for (size_t at = svg.find("<g class=\"panel\""); at != std::string::npos; at = svg.find("<g class=\"panel\"", at + 1)) {
    const std::string group = svg.substr(at, svg.find("</g>", at) - at);
    SvgPanel& p = panels[attribute(tags(group, "g").at(0), "id")];
    const std::string rect = tags(group, "rect").at(0);
    EXPECT_EQ(attribute(rect, "class"), "plot-area");
    p.left = std::stod(attribute(rect, "x")), p.top = std::stod(attribute(rect, "y"));
    p.width = std::stod(attribute(rect, "width")), p.height = std::stod(attribute(rect, "height"));
    p.x_min = std::stod(attribute(rect, "data-x-min")), p.x_max = std::stod(attribute(rect, "data-x-max"));
    p.y_min = std::stod(attribute(rect, "data-y-min")), p.y_max = std::stod(attribute(rect, "data-y-max"));
    for (const std::string& line : tags(group, "polyline")) {
      const std::string id = attribute(line, "data-series");
      p.stroke[id] = attribute(line, "stroke");
      std::istringstream points(attribute(line, "points"));
      for (std::string xy; points >> xy;)
        p.series[id].emplace_back(std::stod(xy.substr(0, xy.find(','))), std::stod(xy.substr(xy.find(',') + 1)));
    }
  }
  return panels;
}

// A run of 3 epochs drawn as SVG: a panel each for the loss, the accuracies and the learning rate,
// every series a point per epoch at the place its --json value maps to, the y range the values'
// own padded by 5%, the x range the epochs'. The same run as PNG (where kiln is built with librsvg):
// the picture's size, white where nothing is drawn, a curve's colour at every one of those points
// (its text: plot_png_cli_test.cpp). Existing pictures are replaced only with --overwrite; bad lines
// are named.
TEST(PlotCli, SvgAndPngOfARealRunPutEveryEpochWhereItsValueIs) {
  TempDir dir;
  Result run;
  const std::vector<nlohmann::json> lines = train_digits(dir, "--epochs 3", run);
  ASSERT_EQ(run.rc, 0) << run.output;
  ASSERT_EQ(lines.size(), 3u);
  const std::string jsonl = dir.file("run.jsonl"), svg_path = dir.file("curves.svg"), png_path = dir.file("curves.png");
  const Result plotted = kiln("plot " + jsonl + " -o " + svg_path);
  ASSERT_EQ(plotted.rc, 0) << plotted.output;
  testing::expect_contains(plotted, {"epochs 1-3", svg_path}, "plot");
  const std::string svg = testing::read_text(svg_path);
  const std::map<std::string, SvgPanel> panels = panels_of(svg);
  const std::map<std::string, std::vector<std::string>> expected = {
      {"loss", {"train_loss"}}, {"accuracy", {"train_accuracy", "test_accuracy"}}, {"lr", {"lr"}}};
  ASSERT_EQ(panels.size(), expected.size()) << svg;
  std::vector<std::tuple<double, double, std::string>> drawn;  // every point, with its series' colour
  for (const auto& [panel_id, keys] : expected) {
    ASSERT_TRUE(panels.count(panel_id)) << panel_id;
    const SvgPanel& p = panels.at(panel_id);
    ASSERT_EQ(p.series.size(), keys.size()) << panel_id;
    double lo = INFINITY, hi = -INFINITY;
    for (const std::string& key : keys)
      for (const nlohmann::json& l : lines) lo = std::min(lo, l[key].get<double>()), hi = std::max(hi, l[key].get<double>());
    EXPECT_NEAR(p.y_min, lo - 0.05 * (hi - lo), 1e-12) << panel_id;
    EXPECT_NEAR(p.y_max, hi + 0.05 * (hi - lo), 1e-12) << panel_id;
    EXPECT_EQ(p.x_min, 1);
    EXPECT_EQ(p.x_max, 3);
    for (const std::string& key : keys) {
      ASSERT_TRUE(p.series.count(key)) << panel_id << " has no " << key;
      const auto& points = p.series.at(key);
      ASSERT_EQ(points.size(), lines.size()) << key;
      for (size_t e = 0; e < lines.size(); ++e) {
        const double v = lines[e][key].get<double>();
        EXPECT_NEAR(points[e].first, p.left + double(e) / 2 * p.width, 0.002) << key << " epoch " << e + 1;
        EXPECT_NEAR(points[e].second, p.top + (p.y_max - v) / (p.y_max - p.y_min) * p.height, 0.002) << key;
        drawn.emplace_back(points[e].first, points[e].second, p.stroke.at(key));
      }
      // The extremes sit 5% of the range inside the frame: 1/22 of the height from its edges.
      const auto [low, high] = std::minmax_element(points.begin(), points.end(),
                                                   [](auto& a, auto& b) { return a.second < b.second; });
      if (keys.size() == 1) {
        EXPECT_NEAR(low->second, p.top + p.height / 22, 0.002) << key << ": the largest value";
        EXPECT_NEAR(high->second, p.top + p.height * 21 / 22, 0.002) << key << ": the smallest value";
      }
    }
  }

#if KILN_PLOT_PNG
  ASSERT_EQ(kiln("plot " + jsonl + " -o " + png_path).rc, 0);
  const std::vector<uint8_t> png = testing::read_bytes(png_path);
  const DecodedImage image = decode_image(png.data(), png.size(), png_path);
  ASSERT_EQ(image.width, 800);
  ASSERT_EQ(image.height, 900);
  // The pixel holding the SVG's point (x, y) (pixel i covers [i, i + 1)), moved by (dx, dy).
  auto pixel = [&](double x, double y, int dx = 0, int dy = 0) {
    const int px = std::clamp(int(std::floor(x)) + dx, 0, image.width - 1);
    const int py = std::clamp(int(std::floor(y)) + dy, 0, image.height - 1);
    const size_t at = (size_t(py) * size_t(image.width) + size_t(px)) * 3;
    return fmt::format("#{:02x}{:02x}{:02x}", image.pixels[at], image.pixels[at + 1], image.pixels[at + 2]);
  };
  EXPECT_EQ(pixel(3, 3), "#ffffff");
  EXPECT_EQ(pixel(799, 899), "#ffffff");
  // The curves are 2 pixels wide with smoothed edges: at a point or beside it a pixel shows a curve's
  // colour over white with at least 60% cover (a curve drawn later may cover another's, as the
  // accuracies meet; where a line ends at the frame its last pixels are partly covered).
  std::vector<std::string> colours;
  for (const auto& [x, y, colour] : drawn) colours.push_back(colour);
  auto shows_a_curve = [&](const std::string& hex) {
    for (const std::string& colour : colours) {
      double cover = 1;
      bool close = true;
      for (int c = 0; c < 3 && close; ++c) {
        const int want = std::stoi(colour.substr(1 + 2 * c, 2), nullptr, 16);
        const int got = std::stoi(hex.substr(1 + 2 * c, 2), nullptr, 16);
        if (want < 200) cover = std::min(cover, (255.0 - got) / (255.0 - want));
        close = std::abs(got - want) <= 0.4 * (255 - want) + 3;
      }
      if (close && cover >= 0.6) return true;
    }
    return false;
  };
  for (const auto& [x, y, colour] : drawn) {
    bool found = false;
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) found = found || shows_a_curve(pixel(x, y, dx, dy));
    EXPECT_TRUE(found) << "no curve at (" << x << ", " << y << "): " << pixel(x, y);
  }
  // Half-way between two epochs the train loss curve passes through its segment's middle (give or
  // take the smoothing of a line's edges).
  const SvgPanel& loss = panels.at("loss");
  const auto& l = loss.series.at("train_loss");
  const double mx = (l[0].first + l[1].first) / 2, my = (l[0].second + l[1].second) / 2;
  bool crossed = false;
  for (int dy = -1; dy <= 1; ++dy) crossed = crossed || pixel(mx, my, 0, dy) == loss.stroke.at("train_loss");
  EXPECT_TRUE(crossed) << "no train loss curve at (" << mx << ", " << my << ")";
#endif

  // Existing pictures stay unless --overwrite.
  const std::string before = testing::read_text(svg_path);
  testing::write_bytes(svg_path, {'m', 'i', 'n', 'e'});
  const Result refused = kiln("plot " + jsonl + " -o " + svg_path);
  EXPECT_EQ(refused.rc, 2) << refused.output;
  testing::expect_contains(refused, {svg_path, "already exists", "--overwrite"}, "plot over a file");
  EXPECT_EQ(testing::read_text(svg_path), "mine");
  ASSERT_EQ(kiln("plot " + jsonl + " -o " + svg_path + " --overwrite").rc, 0);
  EXPECT_EQ(testing::read_text(svg_path), before);

  // Bad input, named.
  const std::string bad = dir.file("bad.jsonl"), empty = dir.file("empty.jsonl");
  std::ofstream(bad) << lines[0].dump() << "\n\n{\"epoch\": 2, \"train_loss\": \"low\", \"train_accuracy\": 0.5}\n";
  std::ofstream(empty) << "\n";
  const Result r_bad = kiln("plot " + bad + " -o " + dir.file("bad.svg"));
  EXPECT_EQ(r_bad.rc, 2) << r_bad.output;
  testing::expect_contains(r_bad, {bad, "line 3", "train_loss", "not a number"}, "plot a bad line");
  const Result r_empty = kiln("plot " + empty + " -o " + dir.file("empty.svg"));
  EXPECT_EQ(r_empty.rc, 2) << r_empty.output;
  testing::expect_contains(r_empty, {empty, "no epoch lines"}, "plot an empty file");
  const Result r_type = kiln("plot " + jsonl + " -o " + dir.file("curves.gif"));
  EXPECT_EQ(r_type.rc, 2) << r_type.output;
  testing::expect_contains(r_type, {"curves.gif", ".svg or .png"}, "plot to a gif");
  EXPECT_FALSE(fs::exists(dir.file("bad.svg")) || fs::exists(dir.file("empty.svg")) || fs::exists(dir.file("curves.gif")));
}

}  // namespace
}  // namespace kiln

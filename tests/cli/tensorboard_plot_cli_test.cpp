// `kiln train --tensorboard DIR` read back by TensorBoard's own reader (the tensorboard package in
// the CPU suite's Python, KILN_PYTHON) and compared with the same run's --json lines; and `kiln plot`
// drawing such a run as SVG and PNG.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace kiln

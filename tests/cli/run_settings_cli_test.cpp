// The run flags of train, bench and data-bench, made from the rows of tools/cli/
// train_run_settings.cpp, bench_settings.cpp and data_bench_settings.cpp: their refusals name the
// flag, the value and a fix before any work; each command has its own flags and no other's; the
// values given reach the fields the rows name (data-bench's JSON echoes them); bench's JSON holds
// the one reported row (--warmup) as it always has, and none of the others; the checks between
// train's flags refuse as before.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/kiln_cli.h"
#include "support/program_fixture.h"
#include "support/temp_dir.h"

namespace {

using kiln::testing::expect_contains;
using kiln::testing::kiln;
using kiln::testing::Result;

const std::string kNoData = "/nonexistent/kiln_run_settings_data";

bool has(const Result& r, const std::string& part) { return r.output.find(part) != std::string::npos; }

// Refused with every part in the message, before any benchmark, loader or training started.
void expect_refused(const std::string& args, const std::vector<std::string>& parts) {
  const Result r = kiln(args);
  EXPECT_NE(r.rc, 0) << "kiln " << args << " was accepted:\n" << r.output;
  expect_contains(r, parts, args);
  const std::vector<std::string> started_lines = {"kiln bench:", "kiln data-bench:", "kiln: training", kNoData};
  for (const std::string& started : started_lines)
    EXPECT_FALSE(has(r, started)) << "kiln " << args << " got past option checking:\n" << r.output;
}

// The last JSON line of `path`.
nlohmann::json last_json_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  EXPECT_FALSE(last.empty()) << path << " holds no JSON line";
  return last.empty() ? nlohmann::json() : nlohmann::json::parse(last);
}

TEST(RunSettingsCli, BenchRefusesInTheRowsWords) {
  expect_refused("bench --device cpu --steps 0",
                 {"--steps: 0 is out of range: it must be >= 1; use e.g. --steps 20"});
  expect_refused("bench --device cpu --steps x",
                 {"--steps: 'x' is not a number: it must be >= 1; use e.g. --steps 20"});
  expect_refused("bench --device cpu --warmup -1",
                 {"--warmup: -1 is out of range: it must be >= 0; use e.g. --warmup 5"});
  expect_refused("bench --device cpu --peak-tflops -1",
                 {"--peak-tflops: -1 is out of range: it must be > 0; use e.g. --peak-tflops 737"});
  expect_refused("bench --device cpu --peak-tbps 0",
                 {"--peak-tbps: 0 is out of range: it must be > 0; use e.g. --peak-tbps 4.18"});
  expect_refused("bench --device cpu --seed -1",
                 {"--seed: -1 is out of range: it must be a whole number from 0 to 18446744073709551615; use e.g. "
                  "--seed 1"});
  expect_refused("bench --device cpu --profile 1", {"not expected: 1"});  // a flag alone: it takes no value
}

TEST(RunSettingsCli, DataBenchRefusesInTheRowsWords) {
  const std::string cmd = "data-bench --data " + kNoData + " ";
  expect_refused(cmd + "--split test",
                 {"--split: 'test' is not one of train, val; use e.g. --split train (the default), or val"});
  expect_refused(cmd + "--batch 0",
                 {"--batch: 0 is out of range: it must be from 1 to 65536; use e.g. --batch 256 (the default)"});
  expect_refused(cmd + "-b 99999999999", {"--batch: 99999999999 is out of range: it must be from 1 to 65536"});
  expect_refused(cmd + "--batches 0", {"--batches: 0 is out of range: it must be from 1 to 1073741824"});
  expect_refused(cmd + "--warmup -1",
                 {"--warmup: -1 is out of range: it must be from 0 to 1048576; use e.g. --warmup 2"});
  expect_refused(cmd + "--dump-count 0", {"--dump-count: 0 is out of range: it must be from 1 to 1048576"});
  // A negative seed was once taken (wrapped to 2^64-1); it is refused as train's and bench's are.
  expect_refused(cmd + "--seed -1", {"--seed: -1 is out of range: it must be a whole number from 0 to "});
}

TEST(RunSettingsCli, TrainsChecksBetweenItsRunFlagsRefuseAsBefore) {
  const std::string cmd = "train --device cpu --epochs 1 --data " + kNoData + " ";
  expect_refused(cmd + "--resume", {"--resume needs --checkpoint FILE, the checkpoint to continue from; add "
                                    "--checkpoint runs/run.safetensors or drop --resume"});
  expect_refused(cmd + "--overwrite", {"--overwrite needs --checkpoint FILE", "drop --overwrite"});
  expect_refused(cmd + "--new-head", {"--new-head needs --init-from FILE", "drop --new-head"});
  expect_refused(cmd + "--resume --overwrite --checkpoint /tmp/x.safetensors",
                 {"--resume and --overwrite exclude each other", "drop one"});
  // -c is --checkpoint (as for eval, predict and export): with it, --resume gets past the options
  // and the run stops at the missing data.
  const Result r = kiln(cmd + "-c /tmp/kiln_run_settings_none.safetensors --resume");
  EXPECT_EQ(r.rc, 2) << r.output;
  expect_contains(r, {"dataset directory '" + kNoData + "' does not exist"}, "train -c ... --resume");
}

TEST(RunSettingsCli, EachCommandHasItsOwnRunFlags) {
  const Result train = kiln("train --help"), bench = kiln("bench --help"), data = kiln("data-bench --help");
  for (const std::string flag : {"-c,--checkpoint FILE", "--json FILE", "--tensorboard DIR", "--resume", "--overwrite",
                                 "--init-from FILE", "--new-head"})
    EXPECT_TRUE(has(train, flag)) << flag << " missing from train --help:\n" << train.output;
  for (const std::string flag : {"--steps INT=20", "--warmup INT=5", "--seed UINT=1", "--profile",
                                 "--peak-tflops FLOAT=737", "--peak-tbps FLOAT=4.18", "--json FILE"})
    EXPECT_TRUE(has(bench, flag)) << flag << " missing from bench --help:\n" << bench.output;
  for (const std::string flag : {"-b,--batch INT in [1 - 65536]=256", "--batches", "--split train|val=train",
                                 "--seed UINT=1", "--host-normalize", "--json FILE", "--dump FILE", "--dump-count"})
    EXPECT_TRUE(has(data, flag)) << flag << " missing from data-bench --help:\n" << data.output;
  for (const std::string flag : {"--steps", "--profile", "--peak-tflops", "--dump", "--split", "--host-normalize"})
    EXPECT_FALSE(has(train, flag)) << flag << " in train --help";
  for (const std::string flag : {"--checkpoint", "--resume", "--tensorboard", "--dump", "--split"})
    EXPECT_FALSE(has(bench, flag)) << flag << " in bench --help";
  for (const std::string flag : {"--checkpoint", "--resume", "--steps", "--profile", "--peak-tflops"})
    EXPECT_FALSE(has(data, flag)) << flag << " in data-bench --help";
}

TEST(RunSettingsCli, DataBenchTakesTheValuesGiven) {
  kiln::testing::TempDir tmp;
  const std::string json = tmp.file("data_bench.jsonl"), dump = tmp.file("samples.u8");
  const Result r = kiln("data-bench --data " + kiln::testing::shared_digits_dir() +
                        " -b 16 --batches 2 --warmup 0 --split val --seed 7 --host-normalize --workers 1 --json " +
                        json + " --dump " + dump + " --dump-count 3");
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"val split", "batch 16", "normalized floats"}, "data-bench");
  const nlohmann::json j = last_json_line(json);
  EXPECT_EQ(j["batch"], 16);
  EXPECT_EQ(j["split"], "val");
  EXPECT_EQ(j["host_normalize"], true);
  EXPECT_EQ(std::filesystem::file_size(dump), 3u * 20 * 20);  // three 20x20 grayscale digits
}

TEST(RunSettingsCli, BenchReportsItsWarmupAndNoOtherRunFlag) {
  kiln::testing::TempDir tmp;
  const std::string json = tmp.file("bench.jsonl");
  const Result r = kiln("bench --device cpu --threads 2 --batch 8 --steps 1 --warmup 2 --seed 3 --json " + json);
  ASSERT_EQ(r.rc, 0) << r.output;
  expect_contains(r, {"batch 8", "of 1,"}, "bench");  // "median step ... ms of 1, ..."
  const nlohmann::json j = last_json_line(json);
  ASSERT_TRUE(j.contains("warmup")) << j.dump();
  EXPECT_TRUE(j["warmup"].is_number_integer()) << j.dump();
  EXPECT_EQ(j["warmup"], 2);
  EXPECT_EQ(j["step_ms"].size(), 1u);
  for (const std::string key : {"steps", "seed", "peak_tflops", "peak_tbps", "json"})
    EXPECT_FALSE(j.contains(key)) << key << " joined bench's JSON: " << j.dump();
  EXPECT_TRUE(j["profile"].is_array());  // the profiled ops, not the --profile row
}

}  // namespace

// The flags of eval, predict, export, pack and plot, made from the rows of tools/cli/
// {eval,predict,export,pack,plot}_settings.cpp: their refusals name the flag, the value and a fix
// before any work (no checkpoint, image or pack is read, nothing is written); the checks the
// commands make when they run refuse as before; each command lists its own flags in --help; the
// values given reach the fields the rows name (pack's banner echoes them); and `kiln settings`
// lists every one under its command's field.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/kiln_cli.h"
#include "support/temp_dir.h"

namespace {

using kiln::testing::expect_contains;
using kiln::testing::kiln;
using kiln::testing::Result;

// Paths that do not exist: a command that got past its options would name them.
const std::string kNoCheckpoint = "/nonexistent/kiln_tool_settings.safetensors";
const std::string kNoFolder = "/nonexistent/kiln_tool_settings_images";
const std::string kNoRun = "/nonexistent/kiln_tool_settings_run.jsonl";

bool has(const Result& r, const std::string& part) { return r.output.find(part) != std::string::npos; }

// Refused with every part in the message, before any file the command would read was looked at.
void expect_refused(const std::string& args, const std::vector<std::string>& parts) {
  const Result r = kiln(args);
  EXPECT_NE(r.rc, 0) << "kiln " << args << " was accepted:\n" << r.output;
  expect_contains(r, parts, args);
  for (const std::string& started : {kNoCheckpoint, kNoFolder, kNoRun, std::string("kiln pack:")})
    EXPECT_FALSE(has(r, started)) << "kiln " << args << " got past option checking:\n" << r.output;
}

TEST(ToolSettingsCli, PackRefusesInTheRowsWords) {
  const std::string cmd = "pack " + kNoFolder + " /nonexistent/kiln_tool_settings_pack ";
  expect_refused(cmd + "--quality 0", {"--quality: 0 is out of range: it must be from 1 to 100; use e.g. --quality 90"});
  expect_refused(cmd + "--quality 101", {"--quality: 101 is out of range: it must be from 1 to 100"});
  expect_refused(cmd + "--quality high", {"--quality: 'high' is not a number", "use e.g. --quality 90"});
  expect_refused(cmd + "--max-side 0",
                 {"--max-side: 0 is out of range: it must be from 1 to 65500; use e.g. --max-side 512"});
  expect_refused(cmd + "--shard-mb 0", {"--shard-mb: 0 is out of range: it must be from 1 to 1048576"});
  expect_refused(cmd + "--workers -1",
                 {"--workers: -1 is out of range: it must be from 0 to 4096; use e.g. --workers 8, or 0 for all cores"});
  expect_refused(cmd + "--skip-bad 1", {"not expected: 1"});  // a flag alone: it takes no value
}

TEST(ToolSettingsCli, PacksValuesReachItsOptions) {
  // The banner comes before the source folder is read, so a missing one shows what the flags set.
  const Result r = kiln("pack " + kNoFolder + " /nonexistent/kiln_tool_settings_pack --max-side 96 --quality 75 "
                        "--shard-mb 3 --workers 1 --skip-bad");
  EXPECT_NE(r.rc, 0) << r.output;
  expect_contains(r, {"(max side 96, quality 75, shards of 3 MB, 1 thread, --skip-bad)"}, "pack with every flag");
}

TEST(ToolSettingsCli, PlotRefusesInTheRowsWords) {
  const std::string cmd = "plot " + kNoRun + " -o /nonexistent/kiln_tool_settings.svg ";
  expect_refused(cmd + "--width 0",
                 {"--width: 0 is out of range: it must be from 200 to 8000; use e.g. --width 800 (the default)"});
  expect_refused(cmd + "--height 9000", {"--height: 9000 is out of range: it must be from 200 to 8000"});
  expect_refused("plot " + kNoRun, {"--output is required"});
  // -o's extension is the run's to check, after the options, as before.
  const Result gif = kiln("plot " + kNoRun + " -o /nonexistent/kiln_tool_settings.gif");
  EXPECT_NE(gif.rc, 0) << gif.output;
  expect_contains(gif, {".svg or .png"}, "plot -o x.gif");
}

TEST(ToolSettingsCli, PredictAndEvalRefuseInTheRowsWords) {
  const std::string predict = "predict -c " + kNoCheckpoint + " " + kNoFolder + "/a.png ";
  expect_refused(predict + "--top 0",
                 {"--top: 0 is out of range: it must be from 1 to 1048576; use e.g. --top 5 (the default)"});
  expect_refused(predict + "-k x", {"--top: 'x' is not a number"});
  expect_refused(predict + "--batch -1", {"--batch: -1 is out of range: it must be from 0 to 65536"});
  expect_refused("predict " + kNoFolder + "/a.png",
                 {"kiln predict: give --checkpoint FILE (written by kiln train) or --model FILE.onnx"});
  const std::string eval = "eval -c " + kNoCheckpoint + " ";
  expect_refused(eval + "--split test", {"--split: 'test' is not one of val, train; use e.g. --split val (the "
                                         "default), or train"});
  expect_refused(eval + "-b 99999999999", {"--batch: 99999999999 is out of range: it must be from 0 to 65536"});
  // --device and --precision: the same rows' words for both commands (checkpoint_run_settings.h).
  for (const std::string& cmd : {predict, eval}) {
    expect_refused(cmd + "--device tpu", {"--device: 'tpu' is not a device: it takes auto, cpu, cuda or cuda:N",
                                          "use e.g. --device cpu, or auto (the default)"});
    expect_refused(cmd + "--precision fp8", {"--precision: 'fp8' is not one of fp32, fp16, bf16, fp64; use e.g. "
                                             "--precision fp32, or leave it out for the checkpoint's"});
  }
  expect_refused(eval + "--json 1", {"not expected: 1"});  // a flag alone (predict's 1 would be an image)
  expect_refused("eval --device cpu", {"kiln eval: give --checkpoint FILE (written by kiln train) or --model FILE.onnx"});
  // Past the options, both stop at the missing checkpoint, as before.
  for (const std::string& cmd : {predict + "--device cpu --precision fp32 -k 3 -b 2 --json",
                                 eval + "--device cpu --precision fp16 --split train -b 4 --json"}) {
    const Result r = kiln(cmd);
    EXPECT_NE(r.rc, 0) << r.output;
    expect_contains(r, {kNoCheckpoint}, cmd);
  }
}

TEST(ToolSettingsCli, ExportRefusesInTheRowsWordsAndAsBefore) {
  kiln::testing::TempDir dir;
  const std::string cmd = "export -c " + kNoCheckpoint + " ";
  expect_refused(cmd + "--torch x.safetensors --torch-conv-bias some",
                 {"--torch-conv-bias: 'some' is not one of auto, zeros, none; use e.g. --torch-conv-bias zeros, or "
                  "auto (the default)"});
  expect_refused(cmd + "--onnx x.onnx --fold-bn --keep-bn", {"--fold-bn excludes --keep-bn"});
  expect_refused(cmd + "--overwrite 1", {"not expected: 1"});
  expect_refused("export --onnx x.onnx", {"--checkpoint is required"});
  // Nothing to write is refused when it runs, before the checkpoint is looked at, as it always was.
  const Result nothing = kiln(cmd + "--overwrite --keep-bn --torch-conv-bias none");
  EXPECT_EQ(nothing.rc, 2) << nothing.output;
  expect_contains(nothing, {"kiln export needs something to write: --onnx FILE", "and/or --torch FILE"},
                  "export without --onnx or --torch");
  // With something to write, the missing checkpoint is named.
  const Result missing = kiln(cmd + "--torch " + dir.file("w.safetensors"));
  EXPECT_EQ(missing.rc, 2) << missing.output;
  expect_contains(missing, {kNoCheckpoint, "does not exist"}, "export of a missing checkpoint");
}

TEST(ToolSettingsCli, EachCommandListsItsFlagsFromTheRows) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"eval", {"-c,--checkpoint FILE", "-m,--model FILE.onnx", "--split val|train=val", "-b,--batch INT in [0 - 65536]=0",
                "--device TEXT=auto", "--precision fp32|fp16|bf16|fp64", "--json", "--data"}},
      {"predict", {"-c,--checkpoint FILE", "-m,--model FILE.onnx", "--image-size INT in [0 - 4096]=0", "-k,--top INT in [1 - 1048576]=5", "-b,--batch", "--device",
                   "--precision", "--json", "IMAGE..."}},
      {"export", {"-c,--checkpoint FILE REQUIRED", "--onnx FILE", "--fold-bn", "--keep-bn", "--torch FILE",
                  "--torch-conv-bias auto|zeros|none=auto", "--overwrite"}},
      {"pack", {"--max-side INT in [1 - 65500]=512", "--quality INT in [1 - 100]=90", "--shard-mb",
                "--workers INT in [0 - 4096]=0 (all cores)", "--skip-bad", "SRC DIR REQUIRED", "OUT DIR REQUIRED"}},
      {"plot", {"-o,--output FILE REQUIRED", "--title", "--width INT in [200 - 8000]=800",
                "--height INT in [200 - 8000]=900", "--overwrite"}},
  };
  for (const auto& [command, flags] : commands) {
    const Result help = kiln(command + " --help");
    ASSERT_EQ(help.rc, 0) << help.output;
    for (const std::string& flag : flags) EXPECT_TRUE(has(help, flag)) << flag << " missing from " << command << " --help:\n" << help.output;
  }
  // Each has its own: predict has no --split, pack no --checkpoint, plot no --batch.
  EXPECT_FALSE(has(kiln("predict --help"), "--split"));
  EXPECT_FALSE(has(kiln("pack --help"), "--checkpoint"));
  EXPECT_FALSE(has(kiln("plot --help"), "--batch"));
}

TEST(ToolSettingsCli, KilnSettingsListsEachUnderItsCommandsField) {
  const Result r = kiln("settings");
  ASSERT_EQ(r.rc, 0) << r.output;
  for (const std::string line :
       {"| `--checkpoint`, `-c` | `EvalArgs::checkpoint` |", "| `--split` | `EvalArgs::split` |  | val, train | `val` |",
        "| `--top`, `-k` | `PredictArgs::top` |  | from 1 to 1048576 | `5` |",
        "| `--precision` | `PredictArgs::precision` |  | fp32, fp16, bf16, fp64 |  |",
        "| `--device` | `EvalArgs::device` |  | auto, cpu, cuda, cuda:N | `auto` |",
        "| `--keep-bn` | `ExportArgs::fold_bn` |  | a flag | `0` |",
        "| `--torch-conv-bias` | `ExportArgs::conv_bias` |  | auto, zeros, none | `auto` |",
        "| `--quality` | `PackCommandArgs::quality` |  | from 1 to 100 | `90` |",
        "| `--output`, `-o` | `PlotArgs::output` |", "| `--width` | `PlotArgs::width` |  | from 200 to 8000 | `800` |"})
    EXPECT_TRUE(has(r, line)) << line << " missing from kiln settings:\n" << r.output;
}

}  // namespace

#pragma once
// The options `kiln plan`, `kiln train` and `kiln bench` share (the model and how it is compiled),
// what they become (kiln::CompileOptions), and the --json file train and bench append to.
#include <CLI/CLI.hpp>

#include <fstream>
#include <string>

#include "kiln/compile.h"

namespace kiln::cli {

// The rows of model, device and classes are cli/common_settings.h's.
struct CommonOptions {
  std::string model = "digits_cnn";  // --model: a zoo name (zoo::names()) or FILE.onnx
  std::string device = "auto";       // --device: auto, cpu, cuda or cuda:N
  int classes = -1;                  // --classes: -1 for the model's or the dataset's count
  // What the settings rows (settings/compile_settings.h) write: the batch, the precision, the
  // fusions, --freeze. The command line's batch default is 64 (the library's is 32).
  CompileOptions compile = [] {
    CompileOptions c;
    c.batch = 64;
    return c;
  }();
};

// The rows of cli/common_settings.h (--model, --device, --classes) and the compile settings' but
// label smoothing (train's): --batch, --precision, --no-fuse, --fuse-seams, --freeze.
void add_common_options(CLI::App* app, CommonOptions& o);

// The compile settings the options ask for, --device resolved ("auto" picks the GPU when there is one).
CompileOptions compile_options(const CommonOptions& o);

// What --device resolved to: "cpu" or "cuda:N", for what the run prints and writes.
std::string device_label(const CompileOptions& c);

// --json FILE: opened for appending before any work, so a bad path fails at once (a kiln::Error);
// no stream (not open) when no file was asked for.
std::ofstream json_appender(const std::string& path);

}  // namespace kiln::cli

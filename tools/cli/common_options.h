#pragma once
// The options `kiln plan`, `kiln train` and `kiln bench` share (the model and how it is compiled),
// what they become (kiln::CompileOptions), and the --json file train and bench append to.
#include <CLI/CLI.hpp>

#include <fstream>
#include <string>

#include "kiln/compile.h"

namespace kiln::cli {

struct CommonOptions {
  std::string model = "digits_cnn";
  int batch = 64;
  std::string device = "auto", precision = "fp32";
  bool no_fuse = false;
  bool fuse_seams = false;  // --fuse-seams: CompileOptions::fuse_seams
  bool fuse_grad_sums = true;  // --fuse-grad-sums 0|1: CompileOptions::fuse_grad_sums
  int classes = -1;
  std::string freeze;  // --freeze: CompileOptions::freeze
};

// --model, --batch, --device, --precision, --no-fuse, --fuse-seams, --fuse-grad-sums, --classes, --freeze.
void add_common_options(CLI::App* app, CommonOptions& o);

// The compile settings the options ask for, --device resolved ("auto" picks the GPU when there is one).
CompileOptions compile_options(const CommonOptions& o);

// What --device resolved to: "cpu" or "cuda:N", for what the run prints and writes.
std::string device_label(const CompileOptions& c);

// --json FILE: opened for appending before any work, so a bad path fails at once (a kiln::Error);
// no stream (not open) when no file was asked for.
std::ofstream json_appender(const std::string& path);

}  // namespace kiln::cli

#pragma once
// kiln train's optimizer options, made from the optimizer families' settings
// (compile/optimizer_family.h): --optimizer takes the families' names, and each flag of their rows
// is one option however many families share it (--momentum is sgd's, lars's and rmsprop's,
// --weight-decay every one's), checked against the rows' range as CLI11 reads it, its help naming
// each family's meaning and default. A value given goes to the chosen family's key; a flag the
// chosen optimizer does not take is refused after parsing, naming what it takes.
#include <CLI/CLI.hpp>

#include <map>
#include <string>

#include "kiln/options.h"

namespace kiln::cli {

struct OptimizerArgs {
  std::string name = "sgd";  // --optimizer
  // kiln train's own defaults where they are not the families' (its weight decay), by key; a
  // family without the key ignores it.
  std::map<std::string, double> defaults;
  // What the options write, by key (a switch as 1 or 0); only those given on the command line count.
  std::map<std::string, double> numbers{};
  std::map<std::string, bool> switches{};
  std::map<std::string, CLI::Option*> options{};  // by key
};

// Adds --optimizer and the families' flags. args.defaults must hold kiln train's defaults already:
// --help shows them.
void add_optimizer_options(CLI::App* app, OptimizerArgs& args);

// After parsing: a CLI::ValidationError for a flag the chosen optimizer does not take, or for
// settings its family refuses together (--nesterov without momentum).
void check_optimizer_options(const OptimizerArgs& args);

// The library's settings: the chosen family, kiln train's defaults for the keys it has, and what
// the command line gave.
OptimizerConfig optimizer_config(const OptimizerArgs& args);

}  // namespace kiln::cli

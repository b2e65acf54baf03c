#pragma once
// "did you mean" for a mistyped subcommand or option: CLI11 alone says only that a subcommand is
// required, or lists the stray words.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace kiln::cli {

// `kiln trian ...`: throws CLI::ExtrasError naming the subcommand nearest to argv[1] and listing
// them all; `kiln --verison` or `kiln -V`: one naming the nearest of kiln's own options (--version);
// `kiln` alone: CLI::RequiredError listing the subcommands. Returns when argv[1] is a subcommand
// or one of kiln's own options (left to CLI11).
void check_subcommand(const CLI::App& app, int argc, const char* const* argv);

// `kiln train --epoch 2`: each unknown option among `extras` with the subcommand's option nearest
// to it. Empty when the stray words hold no option (CLI11's own message lists them).
std::string unknown_options_message(const CLI::App& subcommand, const std::vector<std::string>& extras);

}  // namespace kiln::cli

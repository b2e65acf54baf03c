#pragma once
// CLI11's own refusals of a value, in kiln's words, in one place for every option of every
// subcommand (kiln_app.cpp calls it on the parse's error), so no option is left with CLI11's bare
// messages and a new option needs no line of its own.
#include <CLI/CLI.hpp>

#include <string>

namespace kiln::cli {

// The message for `e`, thrown while parsing `app`, when it is one of CLI11's refusals of a value:
//  - "Could not convert: --batch = 99999999999" (a value the option's type cannot hold; kiln's
//    whole-number options are ints) becomes "--batch: 99999999999 is out of range: it must be >= 1
//    and at most 2147483647 (a 32-bit whole number); use e.g. --batch 64", the range and fix being
//    those of the option's number_in check (checked_range) where it has one, else its default;
//    text that is not a number, or a fraction where a whole number goes, is named so;
//  - CLI::Range's "--image-size: Value 0 not in range 1 to 4096" becomes "--image-size: 0 is out
//    of range: it must be from 1 to 4096; use e.g. --image-size 224 (the default)";
//  - CLI::IsMember's "--channels: 2 not in {1,3}" and CLI::CheckedTransformer's refusals become
//    "--channels: 2 is not one of 1, 3; use e.g. --channels 3 (the default)".
// Empty for any other error (which keeps CLI11's message, or kiln's own check's).
std::string value_refusal(const CLI::App& app, const CLI::Error& e);

}  // namespace kiln::cli

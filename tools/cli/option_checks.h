#pragma once
// The range checks of `kiln plan`, `train` and `bench`, made where CLI11 reads each option. A bad
// value stops the run before any work, with a message that CLI11 opens with the flag
// ("--momentum: ...") and that gives the valid range and a value to use instead.
#include <CLI/CLI.hpp>

#include <functional>
#include <string>

namespace kiln::cli {

// A number for which `in_range` holds: else "<text> is out of range: it must be <range>; <fix>".
// Text that is not a number passes, left to CLI11's own conversion error, which value_refusal
// then words with the same range and fix (kept in the Validator's name: --help shows only
// descriptions).
CLI::Validator number_in(std::function<bool(double)> in_range, std::string range, std::string fix);

// A number >= lo (number_in with the range ">= lo").
CLI::Validator at_least(int lo, std::string fix);

// True for a finite value a float can hold: a double beyond float's range would become inf.
bool fits_finite_float(double v);

// The range and fix of `option`'s number_in check (both empty when it has none), for a message
// about a value that check never saw: one CLI11 refused first (value_refusal).
struct CheckedRange {
  std::string range, fix;
};
CheckedRange checked_range(const CLI::Option& option);

// --seed: a whole number from 0 to 2^64-1. CLI11 alone would clamp a longer one to the largest
// (99999999999999999999 would train as 18446744073709551615, silently); a negative one, or one
// out of 64 bits, is refused with the range; other text (1.5) is left to CLI11's conversion error.
CLI::Validator seed_in_64_bits();

}  // namespace kiln::cli

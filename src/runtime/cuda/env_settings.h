#pragma once
// Settings of the CUDA backend read from KILN_* environment variables. A malformed value is a
// kiln::Error that names the variable and the values it takes, never silently ignored.
#include <optional>
#include <string>

namespace kiln::cuda {

// The variable's text, or nothing when it is unset or empty.
std::optional<std::string> env_text(const char* name);

// A whole number in [lo, hi] (decimal digits only), or `fallback` when the variable is unset or
// empty. `meaning` says what the number counts, for the error message.
int env_int(const char* name, int lo, int hi, int fallback, const char* meaning);

}  // namespace kiln::cuda

#pragma once
// Settings of the CUDA backend: the checks of CompileOptions::cuda and the KILN_* environment
// variables that override it. This file is the one place that reads those variables. A malformed
// value is a kiln::Error that names the variable and the values it takes, never silently ignored.
#include <optional>
#include <string>

#include "kiln/options.h"

namespace kiln::cuda {

// `options` with every KILN_* variable that is set (and not empty) in place of its field; the
// variables, their fields and ranges are the rows of settings/cuda_settings.h (README.md lists them).
CudaOptions with_env_overrides(CudaOptions options);

// kiln::Error naming the field (CompileOptions::cuda.<field>) and its range unless every count
// field is in its row's range (tune_plans 0 to 9999, tune_runs 1 to 100).
void check_cuda_options(const CudaOptions& options);

// The variable's text, or nothing when it is unset or empty.
std::optional<std::string> env_text(const char* name);

// A whole number in [lo, hi] (decimal digits only), or `fallback` when the variable is unset or
// empty. `meaning` says what the number counts, for the error message.
int env_int(const char* name, int lo, int hi, int fallback, const char* meaning);

}  // namespace kiln::cuda

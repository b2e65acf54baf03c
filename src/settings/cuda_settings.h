#pragma once
// The rows of kiln::CudaOptions (CompileOptions::cuda), one a field: its key (the field's name),
// its command-line flag, the KILN_* variable that overrides it, its range and what it does. The
// variables' overrides and the checks of CompileOptions::cuda (runtime/cuda/env_settings.cpp), the
// CLI's flags (tools/cli/backend_options.cpp), `kiln bench --json`'s numbers and README.md's table
// of them (tests/cli/cuda_options_cli_test.cpp compares) all come from these rows, so a new
// setting is one field in kiln/options.h and one row here.
#include <vector>

#include "kiln/options.h"
#include "settings/setting.h"

namespace kiln {

// Over CudaOptions, in the order --help lists them. Every Switch and Count is `reported` (bench's
// JSON, for A/B scripts); the files are not.
const std::vector<Setting>& cuda_settings();

// The row of `key` (a kiln::Error, internal, when there is none: the callers name rows that exist).
const Setting& cuda_setting(const char* key);

}  // namespace kiln

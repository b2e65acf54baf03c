#pragma once
// Every field of kiln::CudaOptions, once: its name, its command-line flag, the KILN_* variable
// that overrides it, what it takes and what it does. The variables' overrides and the checks of
// CompileOptions::cuda (runtime/cuda/env_settings.cpp), the CLI's flags (tools/cli/
// backend_options.cpp) and README.md's table of them (tests/cli/cuda_options_cli_test.cpp
// compares) all come from this table, so a new setting is one field in kiln/options.h and one
// row here.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/options.h"

namespace kiln {

struct CudaOptionField {
  enum class Type : uint8_t {
    Switch,  // a bool, written 0|1
    Count,   // an int in [lo, hi]
    File,    // a path; empty: none
  };
  const char* member;  // the CudaOptions field, e.g. "tune_plans"
  const char* flag;    // the command line's, e.g. "--tune-plans"
  const char* env;     // the variable that overrides it, e.g. "KILN_CUDNN_TUNE_PLANS"
  Type type;
  int lo = 0, hi = 1;  // Count's range (a Switch: 0 to 1)
  const char* help;    // what it does; a Switch's says what 1 and 0 do, a Count's what N counts
  bool CudaOptions::*switch_field = nullptr;
  int CudaOptions::*count_field = nullptr;
  std::string CudaOptions::*file_field = nullptr;
};

// The fields, in the order --help lists them.
const std::vector<CudaOptionField>& cuda_option_fields();

// A Switch's or a Count's value as a number (a Switch: 0 or 1).
int cuda_option_number(const CudaOptions& options, const CudaOptionField& field);
void set_cuda_option_number(CudaOptions& options, const CudaOptionField& field, int value);

}  // namespace kiln

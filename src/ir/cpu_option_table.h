#pragma once
// Every field of kiln::CpuOptions, once, in the style of ir/cuda_option_table.h: its name, its
// command-line flag, its environment variable, its range and what it does. The check of
// CompileOptions::cpu (the CPU backend's, when an executable makes it), the CLI's flag (tools/cli/
// backend_options.cpp) and its help come from this table.
//
// One difference from CudaOptions' table: the variable is the default a field of 0 leaves in
// place, never an override of a field that is set (kiln/options.h says why).
#include <vector>

#include "kiln/options.h"

namespace kiln {

struct CpuOptionField {
  const char* member;  // the CpuOptions field, e.g. "threads"
  const char* flag;    // the command line's, e.g. "--threads"
  const char* env;     // the variable a 0 leaves in charge, e.g. "KILN_THREADS"
  int lo;              // the least value other than 0
  int (*hi)();         // the greatest, which may depend on the machine (kiln::max_threads())
  const char* help;    // what the number counts
  const char* zero;    // what 0 does
  int CpuOptions::*field;
};

// The fields, in the order --help lists them.
const std::vector<CpuOptionField>& cpu_option_fields();

// kiln::Error naming the field (CompileOptions::cpu.<field>), its range, flag and variable unless
// every field is 0 or in its range.
void check_cpu_options(const CpuOptions& options);

}  // namespace kiln

#pragma once
// The rows of kiln::CpuOptions (CompileOptions::cpu): the key (the field's name), the command-line
// flag, the environment variable, the range and what the number counts. The check of
// CompileOptions::cpu (the CPU backend's, when an executable makes it), the CLI's flags and their
// help (tools/cli/backend_options.cpp) and README.md's table come from these rows.
//
// One difference from CudaOptions' rows: the variable is the default a field of 0 leaves in place,
// never an override of a field that is set (kiln/options.h says why), so each row says what its 0
// does (SettingInfo::zero), and the variables are read where they take effect (kiln/threads.h,
// core/cpu_kernels.h), below these rows.
#include <vector>

#include "kiln/options.h"
#include "settings/setting.h"

namespace kiln {

// Over CpuOptions, in the order --help lists them. A range's top may depend on the machine
// (threads: kiln::max_threads()).
const std::vector<Setting>& cpu_settings();

// The row of `key` (a kiln::Error, internal, when there is none: the callers name rows that exist).
const Setting& cpu_setting(const char* key);

// kiln::Error naming the field (CompileOptions::cpu.<field>), its range, flag and variable unless
// every field is 0 or in its range.
void check_cpu_options(const CpuOptions& options);

}  // namespace kiln

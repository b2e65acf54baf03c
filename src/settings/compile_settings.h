#pragma once
// The rows of kiln::CompileOptions' own settings (the batch, the precision, the fusions, freezing,
// label smoothing): one each, with the flag `kiln plan`, `train` and `bench` take, whether a
// resumed run must match it and whether plan and bench report it. The CUDA backend's rows are
// cuda_settings.h's.
#include <vector>

#include "kiln/options.h"
#include "settings/setting.h"

namespace kiln {

// Over CompileOptions, in the order --help lists them.
const std::vector<Setting>& compile_settings();

// The row of `key` (a kiln::Error, internal, when there is none: the callers name rows that exist).
const Setting& compile_setting(const char* key);

}  // namespace kiln

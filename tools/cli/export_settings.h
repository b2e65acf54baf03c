#pragma once
// The rows of `kiln export`'s options (ExportArgs, cli/export_command.h): the checkpoint read, the
// files written (--onnx, --torch) and how (--fold-bn or --keep-bn, --torch-conv-bias, --overwrite).
// Their flags, checks and help come from these rows (add_export_command); that an export writes
// something, and not over its checkpoint, is checked when it runs (run_export).
#include <vector>

#include "cli/export_command.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over ExportArgs, in the order --help lists them.
const std::vector<Setting>& export_settings();

}  // namespace kiln::cli

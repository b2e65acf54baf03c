#pragma once
// The rows of `kiln pack`'s options (PackCommandArgs, cli/pack_command.h): how images are stored
// (--max-side, --quality), the shards' size, the threads and --skip-bad. Their flags, checks and
// help come from these rows (add_pack_command); SRC and OUT stay positionals.
#include <vector>

#include "cli/pack_command.h"
#include "settings/setting.h"

namespace kiln::cli {

// Over PackCommandArgs, in the order --help lists them.
const std::vector<Setting>& pack_settings();

}  // namespace kiln::cli

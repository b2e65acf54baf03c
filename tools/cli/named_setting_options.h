#pragma once
// The flags of settings rows (setting_options.h) whose --help names what a Text row takes more
// precisely than TEXT: a FILE, a DIR.
#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

#include "cli/setting_options.h"
#include "settings/setting.h"

namespace kiln::cli {

// Every row of `rows` with a flag, in the app's own options, in the rows' order; a row whose key
// `shown` names takes that --help type name ({"checkpoint", "FILE"}).
template <class Owner>
void add_named_setting_options(CLI::App* app, const std::vector<Setting>& rows, Owner& owner,
                               const std::map<std::string, std::string>& shown) {
  for (const Setting& row : rows) {
    CLI::Option* option = add_setting_option(app, row, owner);
    if (const auto name = shown.find(row.info.key); option && name != shown.end()) option->type_name(name->second);
  }
}

}  // namespace kiln::cli

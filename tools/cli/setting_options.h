#pragma once
// The command line's flags made from the settings rows (src/settings/setting.h): one flag a row,
// with the row's type name, check, help and default, writing into the struct the rows were
// declared on. A refusal reads as the hand-written checks' do ("--momentum: 1.5 is out of range:
// it must be in [0, 1); use e.g. --momentum 0.9"), and value_refusal finds its range and fix.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "settings/setting.h"

namespace kiln::cli {

// The untyped form the templates call.
CLI::Option* add_setting_option_to(CLI::App* app, const Setting& row, void* owner, const std::string& shown_default);

// `row`'s flag on `app`, its value written into `owner` (whose current value --help shows as the
// default). A Switch is `--x 0|1`, or `--x`/`--no-x` where the row says flag_pair, or `--x` alone
// where it says flag_only; an Interval is `--x MIN,MAX`. Rows without a flag are the library's
// only: nullptr.
template <class Owner>
CLI::Option* add_setting_option(CLI::App* app, const Setting& row, Owner& owner) {
  return add_setting_option_to(app, row, &owner, row.read(&owner));
}

// Every row of `rows` that has a flag, in `group` of --help (empty: the app's own options).
template <class Owner>
void add_setting_options(CLI::App* app, const std::vector<Setting>& rows, Owner& owner, const std::string& group = "") {
  for (const Setting& row : rows)
    if (row.info.flag) {
      CLI::Option* option = add_setting_option(app, row, owner);
      if (!group.empty()) option->group(group);
    }
}

}  // namespace kiln::cli

#pragma once
// An optimizer family's settings as rows over OptimizerConfig (settings/setting.h): a row reads its
// key from OptimizerConfig::values, or its default where the key is not set, as the one text
// recipes and JSON use ("0.9", "true"), writes it back there, and applies when its family is the
// one chosen. The families declare their rows with these builders (src/ops/optimizer/*_optimizer.cpp).
#include <string>
#include <vector>

#include "kiln/options.h"
#include "settings/setting.h"

namespace kiln {

// A number: `info.key`'s value, `default_value` when unset, refused outside `range` (and where a
// float cannot hold it). info.member is filled in: CompileOptions::optimizer.values["<key>"].
Setting optimizer_real(SettingInfo info, double default_value, SettingRange range);

// A switch: 1 or 0 in OptimizerConfig::values, "true" or "false" in recipes.
Setting optimizer_switch(SettingInfo info, bool default_value);

// The rows several families declare under one flag, `--momentum` and `--weight-decay`: the key,
// flag, range, fix and resume rule must agree between them (the command line makes one flag of
// them), so they are made here; a family gives what the setting means in it (its help) and, for
// momentum, its default.
Setting optimizer_momentum(const char* help, double default_value);
Setting optimizer_weight_decay(const char* help);

// `rows` as the settings of the optimizer `family`: each applies when OptimizerConfig::name is
// `family`, and is decided by the "optimizer" row (a recipe's setting of another optimizer is no
// difference of its own).
std::vector<Setting> optimizer_rows(const char* family, std::vector<Setting> rows);

// The "optimizer" row: which family, by one of their names (compile/optimizer_family.h), over
// OptimizerConfig::name; its help names each family's. A resumed run must have the checkpoint's.
const Setting& optimizer_choice();

// The row's default, as its text ("0.9", "false").
std::string setting_default_text(const Setting& row);

// The values a row takes, in the words of kiln's refusals: "a finite number > 0", "in [0, 1)",
// "0 or 1".
std::string setting_range_words(const Setting& row);

}  // namespace kiln

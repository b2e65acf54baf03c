#pragma once
// What `kiln bench --json` (and --json of train) reports of the settings: every row marked
// `reported`, under its key, as a JSON value of its type (a Switch 0 or 1, so that an A/B script
// compares it with the values it set; a Count or Real a number; a Choice or Text a string).
#include <nlohmann/json.hpp>

#include <vector>

#include "settings/setting.h"

namespace kiln::cli {

void add_reported_settings(nlohmann::json& out, const std::vector<Setting>& rows, const void* owner);

}  // namespace kiln::cli

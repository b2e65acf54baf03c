#include "cli/setting_report.h"

#include <string>

namespace kiln::cli {

void add_reported_settings(nlohmann::json& out, const std::vector<Setting>& rows, const void* owner) {
  for (const Setting& row : rows) {
    if (!row.info.reported) continue;
    const std::string text = row.read(owner);
    switch (row.type) {
      case SettingType::Switch: out[row.info.key] = text == "true" ? 1 : 0; break;
      case SettingType::Count: out[row.info.key] = std::stoll(text); break;
      case SettingType::Real: out[row.info.key] = std::stod(text); break;
      case SettingType::Choice:
      case SettingType::Text:
      case SettingType::Interval: out[row.info.key] = text; break;
    }
  }
}

}  // namespace kiln::cli

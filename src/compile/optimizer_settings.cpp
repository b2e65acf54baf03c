#include "compile/optimizer_settings.h"

#include <fmt/format.h>

#include <deque>
#include <mutex>

#include "compile/optimizer_family.h"

namespace kiln {
namespace {

// A row's texts are const char* (settings/setting.h); the member texts made here live as long as
// the program, as the families' rows do.
const char* lasting(std::string text) {
  static std::mutex mutex;
  static std::deque<std::string> texts;
  const std::lock_guard<std::mutex> lock(mutex);
  return texts.emplace_back(std::move(text)).c_str();
}

const OptimizerConfig& config_of(const void* owner) { return *static_cast<const OptimizerConfig*>(owner); }

SettingInfo with_member(SettingInfo info) {
  if (!*info.member) info.member = lasting(fmt::format("CompileOptions::optimizer.values[\"{}\"]", info.key));
  return info;
}

}  // namespace

const Setting& optimizer_choice() {
  static const Setting row = [] {
    std::vector<std::string> names;
    std::string help;
    for (const OptimizerFamily* family : all_optimizer_families()) {
      names.push_back(family->name);
      help += fmt::format("{}{}: {}", help.empty() ? "" : "; ", family->name, family->help);
    }
    return text_choice_setting<OptimizerConfig>({.key = "optimizer",
                                                 .flag = "--optimizer",
                                                 .help = lasting(help),
                                                 .member = "CompileOptions::optimizer.name",
                                                 .fix = "use e.g. --optimizer sgd (the default)",
                                                 .compared_on_resume = true},
                                                &OptimizerConfig::name, names);
  }();
  return row;
}

Setting optimizer_real(SettingInfo info, double default_value, SettingRange range) {
  Setting s = new_setting(with_member(info), SettingType::Real, range);
  const std::string key = info.key;
  s.read = [key, default_value](const void* o) {
    return setting_number_text(static_cast<float>(config_of(o).value_or(key, default_value)));
  };
  s.write = [key](void* o, const std::string& t) { static_cast<OptimizerConfig*>(o)->set(key, std::stod(t)); };
  return s;
}

Setting optimizer_switch(SettingInfo info, bool default_value) {
  Setting s = new_setting(with_member(info), SettingType::Switch, {0, 1});
  const std::string key = info.key;
  s.read = [key, default_value](const void* o) {
    return std::string(config_of(o).value_or(key, default_value ? 1 : 0) != 0 ? "true" : "false");
  };
  s.write = [key](void* o, const std::string& t) {
    static_cast<OptimizerConfig*>(o)->set(key, t == "true" || t == "1" ? 1 : 0);
  };
  return s;
}

Setting optimizer_momentum(const char* help, double default_value) {
  return optimizer_real({.key = "momentum", .flag = "--momentum", .help = help,
                         .fix = "use e.g. --momentum 0.9, or 0 for none", .compared_on_resume = true},
                        default_value, {0, 1, false, true});
}

Setting optimizer_weight_decay(const char* help) {
  return optimizer_real({.key = "weight_decay", .flag = "--weight-decay", .help = help,
                         .fix = "use e.g. --weight-decay 5e-4, or 0 for none", .compared_on_resume = true},
                        0, {0, kUnbounded});
}

std::vector<Setting> optimizer_rows(const char* family, std::vector<Setting> rows) {
  const std::string name = family;
  for (Setting& s : rows) {
    s.applies = [name](const void* o) { return config_of(o).name == name; };
    s.decided_by = "optimizer";
  }
  return rows;
}

std::string setting_default_text(const Setting& row) {
  const OptimizerConfig defaults;
  return row.read(&defaults);
}

std::string setting_range_words(const Setting& row) {
  switch (row.type) {
    case SettingType::Switch: return "0 or 1";
    case SettingType::Choice: return fmt::format("one of {}", fmt::join(row.choices, ", "));
    case SettingType::Text: return "any text";
    case SettingType::Interval: return setting_interval_words(row.range);
    case SettingType::Count:
    case SettingType::Real: break;
  }
  const std::string range = row.range.text(row.type);
  // A range of two ends says "in [a, b)" or "1 to 99" itself; an open-ended one reads as a number.
  if (range.rfind("in ", 0) == 0 || row.type == SettingType::Count) return range;
  return "a finite number " + range;
}

}  // namespace kiln

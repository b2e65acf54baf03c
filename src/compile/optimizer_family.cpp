#include "compile/optimizer_family.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "compile/optimizer_settings.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// "momentum, nesterov and weight_decay".
std::string keys_of(const std::vector<Setting>& rows) {
  std::string keys;
  for (size_t i = 0; i < rows.size(); ++i)
    keys += (i == 0 ? "" : i + 1 == rows.size() ? " and " : ", ") + std::string(rows[i].info.key);
  return keys;
}

bool value_fits(const Setting& row, double v) {
  if (row.type == SettingType::Switch) return v == 0 || v == 1;
  return std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max() && row.range.contains(v);
}

// How the refusal names a setting: its help, its field and kiln train's flag.
std::string described(const Setting& row) {
  return fmt::format("{} ({}; {}{})", row.info.key, row.info.help, row.info.member,
                     row.info.flag ? fmt::format(", kiln train {}", row.info.flag) : std::string());
}

}  // namespace

const OptimizerFamily& optimizer_family(const std::string& name) {
  for (const OptimizerFamily* f : all_optimizer_families())
    if (name == f->name) return *f;
  fail("unknown optimizer '{}' (CompileOptions::optimizer.name, kiln train --optimizer): use {}", name,
       optimizer_names());
}

std::string optimizer_names() {
  const auto& families = all_optimizer_families();
  std::string names;
  for (size_t i = 0; i < families.size(); ++i)
    names += (i == 0 ? "" : i + 1 == families.size() ? " or " : ", ") + std::string(families[i]->name);
  return names;
}

const OptimizerFamily* optimizer_of_state(const std::string& tensor) {
  for (const OptimizerFamily* f : all_optimizer_families())
    for (const char* state : f->state)
      if (state && tensor == state) return f;
  return nullptr;
}

void check_optimizer_config(const OptimizerConfig& config) {
  const OptimizerFamily& family = optimizer_family(config.name);
  const std::vector<Setting>& rows = family.settings();
  for (const auto& [key, value] : config.values) {
    const Setting* row = find_setting(rows, key);
    if (!row)
      fail("the {} optimizer has no setting '{}' (CompileOptions::optimizer.values); it takes {}", family.name, key,
           keys_of(rows));
    if (!value_fits(*row, value))
      fail("the {} optimizer's {} is {}: it must be {}; {}", family.name, described(*row), value,
           setting_range_words(*row),
           row->info.fix ? row->info.fix : fmt::format("its default is {}", setting_default_text(*row)));
  }
  if (family.refusal)
    if (const std::string why = family.refusal(config); !why.empty()) fail("the {} optimizer: {}", family.name, why);
}

double optimizer_value(const OptimizerConfig& config, const std::string& key) {
  const OptimizerFamily& family = optimizer_family(config.name);
  const Setting* row = find_setting(family.settings(), key);
  if (!row) fail("internal: the {} optimizer reads its setting '{}' but declares no such row", family.name, key);
  const std::string text = row->read(&config);
  if (row->type == SettingType::Switch) return text == "true" ? 1 : 0;
  return std::stod(text);
}

}  // namespace kiln

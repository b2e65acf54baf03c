#include "cli/optimizer_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "cli/data_options.h"
#include "cli/option_checks.h"
#include "cli/setting_options.h"
#include "compile/optimizer_family.h"
#include "compile/optimizer_settings.h"
#include "kiln/error.h"

namespace kiln::cli {
namespace {

// kiln train's other names for a flag.
const std::map<std::string, std::string> kAliases = {{"--weight-decay", "--wd"}};

// One flag of the families' rows and every row that has it, in the families' order.
struct SharedFlag {
  std::string flag, key;
  std::vector<std::pair<const OptimizerFamily*, const Setting*>> rows;
};

// A flag means one key, of one type and range, whichever family has it: CLI11 checks its value
// before it knows the optimizer.
void check_same_setting(const SharedFlag& shared, const OptimizerFamily& family, const Setting& row) {
  const Setting& first = *shared.rows.front().second;
  const bool same = shared.key == row.info.key && first.type == row.type && first.range.lo == row.range.lo &&
                    first.range.hi == row.range.hi && first.range.lo_open == row.range.lo_open &&
                    first.range.hi_open == row.range.hi_open && first.info.flag_pair == row.info.flag_pair;
  if (!same)
    fail("internal: {} is the {} optimizer's {} and the {} optimizer's {}, with another type or range; a flag shared "
         "by optimizers must be one setting",
         shared.flag, shared.rows.front().first->name, shared.key, family.name, row.info.key);
}

std::vector<SharedFlag> shared_flags() {
  std::vector<SharedFlag> flags;
  for (const OptimizerFamily* family : all_optimizer_families()) {
    for (const Setting& row : family->settings()) {
      if (!row.info.flag) continue;
      auto it = std::find_if(flags.begin(), flags.end(), [&](const SharedFlag& f) { return f.flag == row.info.flag; });
      if (it == flags.end()) {
        flags.push_back({row.info.flag, row.info.key, {{family, &row}}});
      } else {
        check_same_setting(*it, *family, row);
        it->rows.emplace_back(family, &row);
      }
    }
  }
  return flags;
}

// A row's default as kiln train has it: its own default's text, or kiln train's.
std::string default_text(const OptimizerArgs& a, const Setting& row) {
  const auto it = a.defaults.find(row.info.key);
  return it == a.defaults.end() ? setting_default_text(row) : setting_number_text(static_cast<float>(it->second));
}

// The advice a refusal of the flag's value ends with: its first row's, else its default.
std::string fix_of(const OptimizerArgs& a, const SharedFlag& shared) {
  const Setting& row = *shared.rows.front().second;
  if (row.info.fix) return row.info.fix;
  return fmt::format("use e.g. {} {}", shared.flag, default_text(a, row));
}

// Each family's meaning of the flag, with its default unless every family has the same one (the
// option then shows it as CLI11 shows defaults); a number's range last.
std::string help_of(const OptimizerArgs& a, const SharedFlag& shared, bool one_default) {
  std::string help;
  for (const auto& [family, row] : shared.rows) {
    std::string value = default_text(a, *row);
    if (row->type == SettingType::Switch) value = value == "true" ? "on" : "off";
    help += fmt::format("{}{}: {}{}", help.empty() ? "" : "; ", family->name, row->info.help,
                        one_default && row->type != SettingType::Switch ? "" : ", default " + value);
  }
  const Setting& first = *shared.rows.front().second;
  if (first.type != SettingType::Switch) help += "; " + setting_range_words(first);
  return help;
}

void add_flag(CLI::App* app, OptimizerArgs& a, const SharedFlag& shared) {
  const Setting& first = *shared.rows.front().second;
  bool one_default = true;
  for (const auto& [family, row] : shared.rows) one_default &= default_text(a, *row) == default_text(a, first);
  std::string names = shared.flag;
  if (auto alias = kAliases.find(shared.flag); alias != kAliases.end()) names += "," + alias->second;
  const std::string help = help_of(a, shared, one_default);
  if (first.type == SettingType::Switch) {
    // --nesterov and --no-nesterov.
    a.switches[shared.key] = default_text(a, first) == "true";
    a.options[shared.key] = app->add_flag(fmt::format("{},!--no-{}", names, shared.flag.substr(2)),
                                          a.switches[shared.key], help);
    return;
  }
  a.numbers[shared.key] = std::stod(default_text(a, first));
  const Setting* range = &first;
  const std::string fix = fix_of(a, shared);
  CLI::Option* option =
      app->add_option(names, a.numbers[shared.key], help)
          ->check(number_in([range](double v) { return fits_finite_float(v) && range->range.contains(v); },
                            setting_range_words(first), fix));
  // Families that differ in their default show none here: the help names each one's.
  option->default_str(one_default ? default_text(a, first) : std::string());
  a.options[shared.key] = option;
}

// "--eps and --weight-decay" (the flags of `family`'s settings), and the keys it has no flag for.
std::string what_it_takes(const OptimizerFamily& family) {
  std::vector<std::string> flags, keys;
  for (const Setting& row : family.settings()) {
    if (row.info.flag) flags.push_back(row.info.flag);
    else keys.push_back(row.info.key);
  }
  auto listed = [](const std::vector<std::string>& items) {
    std::string text;
    for (size_t i = 0; i < items.size(); ++i)
      text += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
    return text;
  };
  std::string text = flags.empty() ? "no flags" : listed(flags);
  if (!keys.empty()) text += fmt::format(" ({} through the library only)", listed(keys));
  return text;
}

}  // namespace

void add_optimizer_options(CLI::App* app, OptimizerArgs& a) {
  // The library's row, over kiln train's own field for the name.
  const Setting& choice = optimizer_choice();
  static const Setting row = text_choice_setting<OptimizerArgs>(choice.info, &OptimizerArgs::name, choice.choices);
  add_setting_option(app, row, a)->type_name("TEXT");  // as --schedule's
  for (const SharedFlag& shared : shared_flags()) add_flag(app, a, shared);
}

void check_optimizer_options(const OptimizerArgs& a) {
  const OptimizerFamily& family = optimizer_family(a.name);
  const std::vector<Setting>& rows = family.settings();
  for (const auto& [key, option] : a.options) {
    if (option->count() == 0 || find_setting(rows, key)) continue;
    std::string owners;
    for (const OptimizerFamily* f : all_optimizer_families())
      if (find_setting(f->settings(), key)) owners += (owners.empty() ? "" : " or ") + std::string(f->name);
    const std::string flag = option->get_name();
    throw CLI::ValidationError(
        flag, fmt::format("the {} optimizer has no {} setting ({} is {}'s); {} takes {}; drop {}, or use "
                          "--optimizer {}",
                          family.name, key, flag, owners, family.name, what_it_takes(family), flag, owners));
  }
  if (family.refusal)
    if (const std::string why = family.refusal(optimizer_config(a)); !why.empty())
      throw CLI::ValidationError("--optimizer " + a.name, why);
}

OptimizerConfig optimizer_config(const OptimizerArgs& a) {
  OptimizerConfig config;
  config.name = a.name;
  for (const Setting& row : optimizer_family(a.name).settings()) {
    const std::string key = row.info.key;
    const auto option = a.options.find(key);
    if (option != a.options.end() && option->second->count() > 0)
      config.set(key, row.type == SettingType::Switch ? (a.switches.at(key) ? 1 : 0) : a.numbers.at(key));
    else if (const auto d = a.defaults.find(key); d != a.defaults.end())
      config.set(key, d->second);
  }
  return config;
}

}  // namespace kiln::cli

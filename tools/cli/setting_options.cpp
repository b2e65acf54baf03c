#include "cli/setting_options.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstdlib>

#include "cli/option_checks.h"

namespace kiln::cli {
namespace {

// A Count bounded both ways shows its range, as CLI11's own ranges do ("INT in [0 - 9999]").
std::string type_name(const Setting& row) {
  switch (row.type) {
    case SettingType::Switch: return "0|1";
    case SettingType::Count:
      if (!row.choices.empty()) return "INT";  // its check shows the values: "INT:{1,3}"
      if (row.range.lo > -kUnbounded && row.range.hi < kUnbounded && !row.range.lo_open && !row.range.hi_open)
        return fmt::format("INT in [{} - {}]", row.range.lo, row.range.hi);
      return "INT";
    case SettingType::Real: return "FLOAT";
    case SettingType::Choice: return fmt::format("{}", fmt::join(row.choices, "|"));
    case SettingType::Text: return "TEXT";
    case SettingType::Interval: return "MIN,MAX";
  }
  return "TEXT";
}

// The help line: the row's, and the variable that also sets it.
std::string help_of(const Setting& row) {
  if (!row.info.env) return row.info.help;
  return fmt::format("{} [{}]", row.info.help, row.info.env);
}

// The fix a refusal ends with: the row's, else its default ("use e.g. --tune-plans 4 (the default)").
std::string fix_of(const Setting& row, const std::string& shown_default) {
  return row.info.fix           ? std::string(row.info.fix)
         : shown_default.empty() ? std::string()
                                 : fmt::format("use e.g. {} {} (the default)", row.info.flag, shown_default);
}

// A number's check, made with number_in so that value_refusal words CLI11's own refusals (text
// that is no number, a fraction for a whole number) with the same range (the row's `takes` where
// it has them) and fix.
CLI::Validator number_check(const Setting& row, const std::string& shown_default) {
  const bool real = row.type == SettingType::Real;
  const std::string fix = fix_of(row, shown_default);
  const std::string range_words = row.type == SettingType::Switch ? "0 or 1"
                                  : row.info.takes                ? row.info.takes
                                                                  : row.range.text(row.type);
  return number_in([range = row.range, real](double v) { return range.contains(v) && (!real || fits_finite_float(v)); },
                   range_words, fix);
}

// The row's own check (Setting::check) after its type's: the whole refusal for text, the check
// with number_check's fix for a number (whose text that is no number CLI11 refuses after).
CLI::Validator own_check(const Setting& row, const std::string& shown_default) {
  const bool number = row.type == SettingType::Count || row.type == SettingType::Real;
  const std::string fix = fix_of(row, shown_default);
  return CLI::Validator(
      [row, number, fix](std::string& text) -> std::string {
        if (!number) return row.refusal(text);
        const std::string why = row.check(text);
        return why.empty() || fix.empty() ? why : why + "; " + fix;
      },
      "", "");
}

// A Real's float check before its range: a number no float holds (1e39) is refused as not finite,
// as a NaN or an infinity is (number_in words those itself).
CLI::Validator finite_float_check(const Setting& row) {
  return number_in(fits_finite_float, row.range.text(row.type) + ", and a finite float", row.info.fix ? row.info.fix : "");
}

}  // namespace

CLI::Option* add_setting_option_to(CLI::App* app, const Setting& row, void* owner, const std::string& shown_default) {
  if (!row.info.flag) return nullptr;
  const std::string flag = row.info.alias ? fmt::format("{},{}", row.info.flag, row.info.alias) : row.info.flag;
  if (row.type == SettingType::Switch && (row.info.flag_pair || row.info.flag_only)) {
    const std::string names =
        row.info.flag_only ? flag : fmt::format("{},!--no-{}", flag, std::string(row.info.flag).substr(2));
    return app->add_flag_function(
        names, [row, owner](std::int64_t count) { row.write(owner, count > 0 ? "true" : "false"); }, help_of(row));
  }
  CLI::Option* option = nullptr;
  if (row.type == SettingType::Switch || row.type == SettingType::Count || row.type == SettingType::Real) {
    // Read as its number type first, so CLI11 refuses text that is no number (and value_refusal words it).
    if (row.type == SettingType::Real) {
      option = app->add_option_function<double>(
          flag, [row, owner](double v) { row.write(owner, fmt::format("{}", v)); }, help_of(row));
    } else if (row.type == SettingType::Count && row.range.hi == kUint64Max) {
      // A count of 64 bits (the seed): seed_in_64_bits refuses what is negative or longer than 64
      // bits, which CLI11 alone would clamp.
      option = app->add_option_function<uint64_t>(
          flag, [row, owner](uint64_t v) { row.write(owner, std::to_string(v)); }, help_of(row));
      option->check(seed_in_64_bits());
      option->default_str(shown_default)->type_name("UINT");
      return option;
    } else {
      // An int, as every other whole-number setting is: CLI11 refuses a number past its range, and
      // value_refusal says so with the row's range and fix.
      option = app->add_option_function<int>(
          flag, [row, owner](int v) { row.write(owner, std::to_string(v)); }, help_of(row));
    }
    const std::string shown = row.type == SettingType::Switch ? (shown_default == "true" ? "1" : "0") : shown_default;
    if (row.type == SettingType::Real) option->check(finite_float_check(row));
    if (row.type == SettingType::Count && !row.choices.empty()) {
      // value_refusal words CLI::IsMember's refusal: "--channels: 2 is not one of 1, 3; use e.g. ...".
      std::vector<int> values;
      for (const std::string& c : row.choices) values.push_back(std::stoi(c));
      option->check(CLI::IsMember(values));
    } else {
      option->check(number_check(row, shown));
    }
    if (row.check) option->check(own_check(row, shown));
    option->default_str(shown);
  } else if (row.type == SettingType::Choice || row.type == SettingType::Interval) {
    option = app->add_option_function<std::string>(
        flag, [row, owner](const std::string& text) { row.write(owner, text); }, help_of(row));
    option->check(CLI::Validator(
        [row](std::string& text) -> std::string { return row.refusal(text); }, "", ""));
    option->default_str(shown_default);
  } else {
    option = app->add_option_function<std::string>(
        flag, [row, owner](const std::string& text) { row.write(owner, text); }, help_of(row));
    if (row.check) option->check(own_check(row, shown_default));
    option->default_str(shown_default);
  }
  option->type_name(type_name(row));
  return option;
}

}  // namespace kiln::cli

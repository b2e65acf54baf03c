#include "settings/setting.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "kiln/error.h"

namespace kiln {
namespace {

// The whole of `text` as a number (no trailing characters, no blanks), or nothing.
bool parse_number(const std::string& text, double& out) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && errno != ERANGE && std::isfinite(out);
}

bool whole_number(const std::string& text) {
  size_t i = text[0] == '-' ? 1 : 0;
  if (i == text.size()) return false;
  for (; i < text.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
  return true;
}

std::string bound(double v) { return fmt::format("{}", v); }

}  // namespace

bool SettingRange::contains(double v) const {
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  if (hi_open ? !(v < hi) : !(v <= hi)) return false;
  return true;
}

std::string SettingRange::text(SettingType type) const {
  const bool no_lo = lo <= -kUnbounded, no_hi = hi >= kUnbounded;
  if (no_lo && no_hi) return "any number";
  if (no_hi) return fmt::format("{} {}", lo_open ? ">" : ">=", bound(lo));
  if (no_lo) return fmt::format("{} {}", hi_open ? "<" : "<=", bound(hi));
  if (type == SettingType::Count && !lo_open && !hi_open) return fmt::format("from {} to {}", bound(lo), bound(hi));
  return fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", bound(lo), bound(hi), hi_open ? ")" : "]");
}

Setting new_setting(const SettingInfo& info, SettingType type, SettingRange range) {
  Setting s;
  s.info = info;
  s.type = type;
  s.range = range;
  return s;
}

std::string setting_number_text(float x) { return fmt::format("{}", x); }
std::string setting_number_text(double x) { return fmt::format("{}", x); }

std::string setting_interval_text(const std::array<double, 2>& v) { return fmt::format("{},{}", v[0], v[1]); }

bool parse_setting_interval(const std::string& text, std::array<double, 2>& out) {
  const size_t comma = text.find(',');
  if (comma == std::string::npos) return false;
  std::array<double, 2> v{};
  if (!parse_number(text.substr(0, comma), v[0]) || !parse_number(text.substr(comma + 1), v[1])) return false;
  out = v;
  return true;
}

std::string setting_interval_words(const SettingRange& each) {
  return fmt::format("MIN,MAX with MIN <= MAX, each {}", each.text(SettingType::Real));
}

namespace {

// What refusal says of `text` before the row's own check: its type's and range's words.
std::string type_refusal(const Setting& row, const std::string& text) {
  const SettingInfo& info = row.info;
  const SettingType type = row.type;
  const SettingRange& range = row.range;
  const std::vector<std::string>& choices = row.choices;
  const std::string use = info.fix ? fmt::format("; {}", info.fix) : std::string();
  switch (type) {
    case SettingType::Switch:
      if (text == "0" || text == "1" || text == "true" || text == "false") return "";
      for (const std::string& c : choices)
        if (c == text) return "";
      return fmt::format("'{}' is not 0 or 1{}", text, use);
    case SettingType::Count:
    case SettingType::Real: {
      double v = 0;
      if (!parse_number(text, v) || (type == SettingType::Count && !whole_number(text)))
        return fmt::format("'{}' is not {}{}", text, type == SettingType::Count ? "a whole number" : "a number", use);
      if (type == SettingType::Real && std::fabs(v) > std::numeric_limits<float>::max())
        return fmt::format("{} is out of range: it must be a finite float{}", text, use);
      if (info.zero && v == 0) return "";
      if (!range.contains(v))
        return fmt::format("{} is out of range: it must be {}{}{}", text, info.takes ? info.takes : range.text(type),
                           info.zero ? ", or 0" : "", use);
      if (type == SettingType::Count && !choices.empty() &&
          std::none_of(choices.begin(), choices.end(), [v](const std::string& c) { return std::stod(c) == v; }))
        return fmt::format("{} is not one of {}{}", text, fmt::join(choices, ", "), use);
      return "";
    }
    case SettingType::Choice:
      for (const std::string& c : choices)
        if (c == text) return "";
      return fmt::format("'{}' is not one of {}{}", text, fmt::join(choices, ", "), use);
    case SettingType::Text: return "";
    case SettingType::Interval: {
      std::array<double, 2> v{};
      if (!parse_setting_interval(text, v))
        return fmt::format("'{}' is not a range: it takes two numbers, MIN,MAX{}", text, use);
      if (!range.contains(v[0]) || !range.contains(v[1]))
        return fmt::format("{} is out of range: MIN and MAX must each be {}{}", text, range.text(SettingType::Real),
                           use);
      if (v[0] > v[1]) return fmt::format("{} is not a range: its MIN is above its MAX{}", text, use);
      return "";
    }
  }
  return "";
}

}  // namespace

std::string Setting::refusal(const std::string& text) const {
  const std::string use = info.fix ? fmt::format("; {}", info.fix) : std::string();
  const std::string typed = type_refusal(*this, text);
  if (!typed.empty() || !check) return typed;
  const std::string why = check(text);
  return why.empty() ? why : why + use;
}

std::string Setting::fix_for(const std::string& value) const {
  if (!info.flag) return fmt::format("{} as {}", value, info.member);
  if (type == SettingType::Switch && (info.flag_pair || info.flag_only)) {
    // "--hflip" or "--no-hflip"; a flag alone is given or not ("no --skip-bad"); an optional
    // switch's "auto" is neither.
    const std::string flag = info.flag;
    std::string off = info.flag_pair ? "--no-" + flag.substr(2) : "no " + flag;
    if (value != "true" && value != "false") off = fmt::format("neither {} nor {}", flag, off);
    return fmt::format("{} ({})", value == "true" ? flag : off, info.member);
  }
  if (type == SettingType::Switch) return fmt::format("{} {} ({})", info.flag, value == "true" ? 1 : 0, info.member);
  return fmt::format("{} {} ({})", info.flag, value, info.member);
}

const Setting* find_setting(const std::vector<Setting>& rows, const std::string& key) {
  for (const Setting& s : rows)
    if (key == s.info.key) return &s;
  return nullptr;
}

int setting_number(const Setting& row, const void* owner) {
  if (row.type != SettingType::Switch && row.type != SettingType::Count)
    fail("internal: {} is no Switch or Count", row.info.member);
  const std::string text = row.read(owner);
  if (row.type == SettingType::Switch) return text == "true" ? 1 : 0;
  return std::stoi(text);
}

void set_setting_number(const Setting& row, void* owner, int value) {
  if (row.type != SettingType::Switch && row.type != SettingType::Count)
    fail("internal: {} is no Switch or Count", row.info.member);
  row.write(owner, std::to_string(value));
}

}  // namespace kiln

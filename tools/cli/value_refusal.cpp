#include "cli/value_refusal.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "cli/option_checks.h"

namespace kiln::cli {
namespace {

struct Refused {
  std::string flag, text;  // "--batch", "99999999999"
  std::string range;       // "from 1 to 4096" when CLI::Range refused it; else "" (the option's check says)
  std::string members;     // "1, 3" when CLI::IsMember refused it
};

// The option named `flag` of `app` or of one of its subcommands, the parsed ones first.
const CLI::Option* find_option(const CLI::App& app, const std::string& flag) {
  std::vector<const CLI::App*> apps = {&app};
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    apps.insert(sub->parsed() ? apps.begin() : apps.end(), sub);
  for (const CLI::App* a : apps)
    if (const CLI::Option* opt = a->get_option_no_throw(flag)) return opt;
  return nullptr;
}

// "1.000000" (std::to_string's, in CLI::Range's message) as "1".
std::string short_number(const std::string& text) {
  double v = 0;
  return CLI::detail::lexical_cast(text, v) ? fmt::format("{}", v) : text;
}

// CLI::CheckedTransformer's refusal: "--cpu-kernels: Check foo value in {onednn->1,reference->2}
// OR {1,2} FAILED", its names being the first set's keys.
std::optional<Refused> not_a_key(const std::string& flag, const std::string& rest) {
  const std::string check = "Check ", in = " value in {", failed = " FAILED";
  const size_t at = rest.find(in), close = rest.find('}', at == std::string::npos ? 0 : at);
  if (rest.rfind(check, 0) != 0 || at == std::string::npos || close == std::string::npos ||
      rest.size() < failed.size() || rest.compare(rest.size() - failed.size(), failed.size(), failed) != 0)
    return std::nullopt;
  std::string members;
  for (size_t k = at + in.size(); k < close;) {
    const size_t comma = std::min(rest.find(',', k), close);
    const std::string item = rest.substr(k, comma - k);
    members += (members.empty() ? "" : ", ") + item.substr(0, item.find("->"));
    k = comma + 1;
  }
  return Refused{flag, rest.substr(check.size(), at - check.size()), "", members};
}

// CLI::IsMember's refusals: "--channels: 2 not in {1,3}", or for text that is not of the set's
// type only "--channels: 99999999999" (checked against the option's last value by the caller);
// and CLI::CheckedTransformer's (not_a_key).
std::optional<Refused> not_a_member(const std::string& what) {
  const size_t colon = what.find(": ");
  if (colon == std::string::npos || what.rfind("--", 0) != 0) return std::nullopt;
  const std::string rest = what.substr(colon + 2);
  if (rest.empty()) return std::nullopt;
  if (std::optional<Refused> key = not_a_key(what.substr(0, colon), rest)) return key;
  const size_t in = rest.rfind(" not in {");
  if (in == std::string::npos || rest.back() != '}') return Refused{what.substr(0, colon), rest, "", ""};
  std::string members = rest.substr(in + 9, rest.size() - in - 10);
  for (size_t comma = members.find(','); comma != std::string::npos; comma = members.find(',', comma + 2))
    members.insert(comma + 1, " ");
  return Refused{what.substr(0, colon), rest.substr(0, in), "", members};
}

// What CLI11 refused, from its message: "Could not convert: --batch = 99999999999", CLI::Range's
// "--image-size: Value 0 not in range 1 to 4096" or CLI::IsMember's (not_a_member).
std::optional<Refused> refused(const CLI::Error& e) {
  const std::string what = e.what();
  const std::string convert = "Could not convert: ";
  if (dynamic_cast<const CLI::ConversionError*>(&e) && what.rfind(convert, 0) == 0) {
    const size_t equals = what.find(" = ", convert.size());
    if (equals == std::string::npos) return std::nullopt;
    return Refused{what.substr(convert.size(), equals - convert.size()), what.substr(equals + 3), "", ""};
  }
  if (!dynamic_cast<const CLI::ValidationError*>(&e)) return std::nullopt;
  const size_t value = what.find(": Value "), in = what.find(" not in range "), to = what.rfind(" to ");
  if (value == std::string::npos || in == std::string::npos || to == std::string::npos || !(value < in && in < to))
    return not_a_member(what);
  const std::string lo = what.substr(in + 14, to - in - 14), hi = what.substr(to + 4);
  return Refused{what.substr(0, value), what.substr(value + 8, in - value - 8),
                 fmt::format("from {} to {}", short_number(lo), short_number(hi)), ""};
}

}  // namespace

std::string value_refusal(const CLI::App& app, const CLI::Error& e) {
  const std::optional<Refused> r = refused(e);
  if (!r) return "";
  const CLI::Option* opt = find_option(app, r->flag);
  if (!opt) return "";
  // With TakeLast, CLI11's message lists every value given; the last one is the one refused.
  const std::string text = opt->results().empty() ? r->text : opt->results().back();
  // Its number_in check's range and fix, when it has one; else its default as the fix.
  const CheckedRange checked = checked_range(*opt);
  std::string range = r->range.empty() ? checked.range : r->range, fix = checked.fix;
  if (fix.empty())
    fix = opt->get_default_str().empty() ? fmt::format("{} --help lists what it takes", opt->get_name())
                                         : fmt::format("use e.g. {} {} (the default)", r->flag, opt->get_default_str());
  if (dynamic_cast<const CLI::ValidationError*>(&e) && r->range.empty()) {  // CLI::IsMember's
    // Its set is its description, which --help shows: "{1,3}".
    std::string members = r->members;
    if (members.empty()) {
      const std::string shown = opt->get_type_name();
      const size_t open = shown.find(":{");
      if (text != r->text || open == std::string::npos || shown.back() != '}') return "";
      members = not_a_member("--x: x not in " + shown.substr(open + 1))->members;
    }
    return fmt::format("{}: {} is not one of {}; {}", r->flag, text, members, fix);
  }
  // CLI11's type names: INT for kiln's int options, UINT for the 64-bit seeds, FLOAT for float and double.
  const std::string type = opt->get_type_name().substr(0, opt->get_type_name().find(':'));
  const bool whole = type == "INT" || type == "UINT";
  double v = 0;
  if (!CLI::detail::lexical_cast(text, v))
    return fmt::format("{}: '{}' is not a number: it must be {}; {}", r->flag, text,
                       range.empty() ? (whole ? "a whole number" : "a number") : range, fix);
  if (whole && std::isfinite(v) && v != std::floor(v))
    return fmt::format("{}: {} is not a whole number: it must be {}; {}", r->flag, text,
                       range.empty() ? "a whole number" : range, fix);
  // What the type holds, when that is what refused the value (CLI::Range's refusals are its own).
  std::string limit;
  if (r->range.empty() && type == "INT")
    limit = v < 0 ? fmt::format("at least {} (a 32-bit whole number)", std::numeric_limits<int>::min())
                  : fmt::format("at most {} (a 32-bit whole number)", std::numeric_limits<int>::max());
  else if (r->range.empty() && type == "UINT")
    limit = fmt::format("at most {} (64 bits)", std::numeric_limits<uint64_t>::max());
  else if (r->range.empty() && type == "FLOAT")
    limit = "a finite number";
  if (range.empty()) range = limit.empty() ? "in its range" : limit;
  else if (!limit.empty()) range += (type == "FLOAT" ? ", " : " and ") + limit;
  return fmt::format("{}: {} is out of range: it must be {}; {}", r->flag, text, range, fix);
}

}  // namespace kiln::cli

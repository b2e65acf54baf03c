#include "cli/option_checks.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::cli {
namespace {

// number_in's Validator name: this tag, its range and its fix, one a line.
constexpr const char* kRangeTag = "kiln-range";

}  // namespace

CLI::Validator number_in(std::function<bool(double)> in_range, std::string range, std::string fix) {
  const std::string name = fmt::format("{}\n{}\n{}", kRangeTag, range, fix);
  return CLI::Validator(
      [in_range = std::move(in_range), range = std::move(range), fix = std::move(fix)](std::string& text)
          -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return {};
        // No kiln number may be infinite or NaN: "1e400" reads as an infinity.
        const std::string use = fix.empty() ? std::string() : "; " + fix;
        if (!std::isfinite(v) && range.find("finite") == std::string::npos)
          return fmt::format("{} is out of range: it must be {}, and finite{}", text, range, use);
        if (in_range(v)) return {};
        return fmt::format("{} is out of range: it must be {}{}", text, range, use);
      },
      "", name);
}

CheckedRange checked_range(const CLI::Option& option) {
  CheckedRange c;
  const std::string tag = std::string(kRangeTag) + "\n";
  for (int i = 0;; ++i) {
    const CLI::Validator* v = nullptr;
    try {
      v = const_cast<CLI::Option&>(option).get_validator(i);  // CLI11 2.1 has no const form
    } catch (const CLI::OptionNotFound&) {
      return c;
    }
    const std::string& name = v->get_name();
    if (name.rfind(tag, 0) != 0) continue;
    const size_t second = name.find('\n', tag.size());
    c.range = name.substr(tag.size(), second - tag.size());
    c.fix = name.substr(second + 1);
  }
}

CLI::Validator at_least(int lo, std::string fix) {
  return number_in([lo](double v) { return v >= lo; }, fmt::format(">= {}", lo), std::move(fix));
}

bool fits_finite_float(double v) { return std::isfinite(v) && std::abs(v) <= std::numeric_limits<float>::max(); }

CLI::Validator seed_in_64_bits() {
  // The sign first: -1 converts to a double, and its message is the range's.
  const CLI::Validator not_negative =
      number_in([](double v) { return v >= 0; }, "a whole number from 0 to 18446744073709551615", "use e.g. --seed 1");
  return CLI::Validator(
      [not_negative](std::string& text) -> std::string {
        if (std::string negative = not_negative(text); !negative.empty()) return negative;
        // Only a run of digits (decimal, or hex after 0x) can be too long for 64 bits; anything
        // else is left to CLI11's conversion.
        const bool hex = text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
        const size_t digits = hex ? 2 : 0;
        if (text.size() == digits) return {};
        for (size_t i = digits; i < text.size(); ++i) {
          const auto c = static_cast<unsigned char>(text[i]);
          if (!(hex ? std::isxdigit(c) : std::isdigit(c))) return {};
        }
        uint64_t value = 0;
        const char* const first = text.data() + digits;
        const auto result = std::from_chars(first, text.data() + text.size(), value, hex ? 16 : 10);
        if (result.ec != std::errc::result_out_of_range) return {};
        return fmt::format("{} is out of range: it must be a whole number from 0 to {} (64 bits); use e.g. --seed 1",
                           text, std::numeric_limits<uint64_t>::max());
      },
      "", "");
}

}  // namespace kiln::cli

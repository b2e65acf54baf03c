// A row's own check (Setting::check) and its words for what it takes (SettingInfo::takes): for
// settings whose type alone cannot say what they take (a device spec, HOST:PORT, a count whose 0
// is no value). refusal asks the type first, then the check, and ends either with the row's fix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "settings/setting.h"

namespace kiln {
namespace {

struct Knobs {
  std::string port = "auto";
  int count = -1;
};

std::vector<Setting> rows() {
  Setting port = text_setting<Knobs>({.key = "port",
                                      .flag = "--port",
                                      .member = "Knobs::port",
                                      .fix = "use e.g. --port 80",
                                      .takes = "auto or a port number"},
                                     &Knobs::port);
  port.check = [](const std::string& t) {
    return t == "auto" || (!t.empty() && t.find_first_not_of("0123456789") == std::string::npos)
               ? std::string()
               : "'" + t + "' is no port";
  };
  Setting count = count_setting<Knobs>(
      {.key = "count", .flag = "--count", .member = "Knobs::count", .fix = "use e.g. --count 2", .takes = "-1 or >= 1"},
      &Knobs::count, {-1, kUnbounded});
  count.check = [](const std::string& t) { return t == "0" ? std::string("0 is out of range: it must be -1 or >= 1") : ""; };
  Setting plain = text_setting<Knobs>({.key = "plain", .flag = "--plain", .member = "Knobs::port"}, &Knobs::port);
  return {port, count, plain};
}

const Setting& row(const std::string& key) {
  static const std::vector<Setting> all = rows();
  return *find_setting(all, key);
}

TEST(SettingCheck, TextIsRefusedByTheRowsCheckWithItsFix) {
  EXPECT_EQ(row("port").refusal("auto"), "");
  EXPECT_EQ(row("port").refusal("8080"), "");
  EXPECT_EQ(row("port").refusal("http"), "'http' is no port; use e.g. --port 80");
  EXPECT_EQ(row("port").refusal(""), "'' is no port; use e.g. --port 80");
  // Without a check, text is text.
  EXPECT_EQ(row("plain").refusal("http"), "");
}

TEST(SettingCheck, ANumberIsCheckedByItsTypeFirstInItsOwnWords) {
  EXPECT_EQ(row("count").refusal("-1"), "");
  EXPECT_EQ(row("count").refusal("3"), "");
  // The range's refusal names what the row takes, not the bare range (">= -1").
  EXPECT_EQ(row("count").refusal("-2"), "-2 is out of range: it must be -1 or >= 1; use e.g. --count 2");
  EXPECT_EQ(row("count").refusal("0"), "0 is out of range: it must be -1 or >= 1; use e.g. --count 2");
  // Text that is no whole number is the type's to refuse; the check never sees it.
  EXPECT_EQ(row("count").refusal("x"), "'x' is not a whole number; use e.g. --count 2");
  EXPECT_EQ(row("count").refusal("0.5"), "'0.5' is not a whole number; use e.g. --count 2");
}

}  // namespace
}  // namespace kiln

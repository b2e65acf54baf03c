// The row kinds the data flags brought (src/settings/setting.h): a range of two numbers MIN,MAX
// (Interval), a whole number of a few values (count_choice_setting), a switch that may be left
// unset (optional_switch_setting) and a flag given alone (SettingInfo::flag_only). Each reads its
// field as the text recipes hold, writes back what it reads and refuses what it does not take in
// the user's terms, with the row's fix.
#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "settings/setting.h"

namespace kiln {
namespace {

struct Knobs {
  std::array<double, 2> scale{0.08, 1.0}, ratio{3.0 / 4.0, 4.0 / 3.0};
  int channels = 3;
  std::optional<bool> flip;
  bool skip = false;
};

std::vector<Setting> rows() {
  return {
      interval_setting<Knobs>({.key = "scale", .flag = "--scale", .member = "Knobs::scale", .fix = "use e.g. --scale 0.08,1"},
                              &Knobs::scale, {0, 1, true, false}),
      interval_setting<Knobs>({.key = "ratio", .flag = "--ratio", .member = "Knobs::ratio"}, &Knobs::ratio,
                              {0, kUnbounded, true, false}),
      count_choice_setting<Knobs>({.key = "channels", .flag = "--channels", .member = "Knobs::channels"},
                                  &Knobs::channels, {1, 3}),
      optional_switch_setting<Knobs>({.key = "flip", .flag = "--flip", .member = "Knobs::flip", .flag_pair = true},
                                     &Knobs::flip),
      switch_setting<Knobs>({.key = "skip", .flag = "--skip", .member = "Knobs::skip", .flag_only = true},
                            &Knobs::skip),
  };
}

const Setting& row(const std::string& key) {
  static const std::vector<Setting> all = rows();
  return *find_setting(all, key);
}

TEST(SettingKinds, AnIntervalIsTwoNumbersInOrderWithinItsRange) {
  Knobs k;
  EXPECT_EQ(row("scale").type, SettingType::Interval);
  // Each end as the shortest text that reads back as the same double: the recipe's texts.
  EXPECT_EQ(row("scale").text_of(k), "0.08,1");
  EXPECT_EQ(row("ratio").text_of(k), "0.75,1.3333333333333333");
  row("ratio").write(&k, "0.5,2");
  EXPECT_EQ(k.ratio, (std::array<double, 2>{0.5, 2.0}));
  row("ratio").write(&k, "0.75,1.3333333333333333");
  EXPECT_EQ(k.ratio[1], 4.0 / 3.0);
  EXPECT_EQ(row("scale").refusal("0.5,0.5"), "");
  EXPECT_EQ(row("scale").refusal("1,1"), "");
  EXPECT_EQ(row("scale").refusal("1.0"), "'1.0' is not a range: it takes two numbers, MIN,MAX; use e.g. --scale 0.08,1");
  for (const std::string bad : {"", ",", "0.5,", ",0.5", "a,1", "0.5,1,1", "0.5, 1", "nan,1", "0.5,inf"})
    EXPECT_NE(row("scale").refusal(bad).find("is not a range: it takes two numbers"), std::string::npos) << bad;
  EXPECT_EQ(row("scale").refusal("0,1"), "0,1 is out of range: MIN and MAX must each be in (0, 1]; use e.g. --scale 0.08,1");
  EXPECT_EQ(row("scale").refusal("0.5,1.5"),
            "0.5,1.5 is out of range: MIN and MAX must each be in (0, 1]; use e.g. --scale 0.08,1");
  EXPECT_EQ(row("scale").refusal("0.9,0.5"), "0.9,0.5 is not a range: its MIN is above its MAX; use e.g. --scale 0.08,1");
  EXPECT_EQ(row("ratio").refusal("-1,2"), "-1,2 is out of range: MIN and MAX must each be > 0");
  EXPECT_EQ(row("ratio").refusal("0.1,1e30"), "");
  EXPECT_EQ(setting_interval_words(row("scale").range), "MIN,MAX with MIN <= MAX, each in (0, 1]");
  EXPECT_EQ(row("scale").fix_for("0.08,1"), "--scale 0.08,1 (Knobs::scale)");
}

TEST(SettingKinds, ACountOfAFewValuesTakesOnlyThose) {
  Knobs k;
  const Setting& c = row("channels");
  EXPECT_EQ(c.type, SettingType::Count);
  EXPECT_EQ(c.choices, (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(c.text_of(k), "3");
  c.write(&k, "1");
  EXPECT_EQ(k.channels, 1);
  EXPECT_EQ(c.refusal("1"), "");
  EXPECT_EQ(c.refusal("3"), "");
  EXPECT_EQ(c.refusal("2"), "2 is not one of 1, 3");
  EXPECT_EQ(c.refusal("4"), "4 is out of range: it must be from 1 to 3");
  EXPECT_EQ(c.refusal("1.5"), "'1.5' is not a whole number");
  EXPECT_EQ(c.fix_for("3"), "--channels 3 (Knobs::channels)");
}

TEST(SettingKinds, AnOptionalSwitchReadsAutoWhenUnset) {
  Knobs k;
  const Setting& f = row("flip");
  EXPECT_EQ(f.text_of(k), "auto");
  f.write(&k, "false");
  EXPECT_EQ(k.flip, std::optional<bool>(false));
  EXPECT_EQ(f.text_of(k), "false");
  f.write(&k, "1");
  EXPECT_EQ(f.text_of(k), "true");
  f.write(&k, "auto");
  EXPECT_FALSE(k.flip.has_value());
  for (const std::string ok : {"auto", "true", "false", "0", "1"}) EXPECT_EQ(f.refusal(ok), "") << ok;
  EXPECT_EQ(f.refusal("maybe"), "'maybe' is not 0 or 1");
  EXPECT_EQ(f.fix_for("true"), "--flip (Knobs::flip)");
  EXPECT_EQ(f.fix_for("false"), "--no-flip (Knobs::flip)");
  EXPECT_EQ(f.fix_for("auto"), "neither --flip nor --no-flip (Knobs::flip)");
  // A plain switch takes no "auto".
  EXPECT_NE(row("skip").refusal("auto"), "");
}

TEST(SettingKinds, AFlagAloneIsGivenOrNot) {
  Knobs k;
  const Setting& s = row("skip");
  EXPECT_EQ(s.text_of(k), "false");
  s.write(&k, "true");
  EXPECT_TRUE(k.skip);
  EXPECT_EQ(s.fix_for("true"), "--skip (Knobs::skip)");
  EXPECT_EQ(s.fix_for("false"), "no --skip (Knobs::skip)");
}

}  // namespace
}  // namespace kiln

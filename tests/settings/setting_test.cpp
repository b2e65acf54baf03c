// The settings rows (src/settings/setting.h): each type reads and writes its field as the one text
// recipes and JSON use, refuses a value it does not take in the user's terms, and keeps working
// when a part's rows are placed into a larger struct.
#include "settings/setting.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace kiln {
namespace {

enum class Shade : uint8_t { Light, Dark };

struct Part {
  float rate = 0.05f;
  int count = 4;
  bool on = true;
  Shade shade = Shade::Dark;
  std::string path;
};

struct Whole {
  int other = 0;
  Part part;
};

std::vector<Setting> part_rows() {
  return {
      real_setting<Part>({.key = "rate", .flag = "--rate", .member = "Part::rate", .fix = "use e.g. --rate 0.1"}, &Part::rate,
                         {0, 1, true, false}),
      count_setting<Part>({.key = "count", .flag = "--count", .member = "Part::count"}, &Part::count, {1, 99}),
      switch_setting<Part>({.key = "on", .flag = "--on", .member = "Part::on", .flag_pair = true}, &Part::on),
      choice_setting<Part, Shade>({.key = "shade", .flag = "--shade", .member = "Part::shade"}, &Part::shade,
                                  {{"light", Shade::Light}, {"dark", Shade::Dark}}),
      text_setting<Part>({.key = "path", .flag = "--path", .member = "Part::path"}, &Part::path),
  };
}

TEST(Setting, ReadsEachTypeAsItsRecipeText) {
  const std::vector<Setting> rows = part_rows();
  Part p;
  EXPECT_EQ(find_setting(rows, "rate")->text_of(p), "0.05");
  EXPECT_EQ(find_setting(rows, "count")->text_of(p), "4");
  EXPECT_EQ(find_setting(rows, "on")->text_of(p), "true");
  EXPECT_EQ(find_setting(rows, "shade")->text_of(p), "dark");
  EXPECT_EQ(find_setting(rows, "path")->text_of(p), "");
  EXPECT_EQ(find_setting(rows, "missing"), nullptr);
}

TEST(Setting, WritesWhatItReadsBack) {
  const std::vector<Setting> rows = part_rows();
  Part p;
  find_setting(rows, "rate")->write(&p, "0.0005");
  find_setting(rows, "count")->write(&p, "17");
  find_setting(rows, "on")->write(&p, "0");
  find_setting(rows, "shade")->write(&p, "light");
  find_setting(rows, "path")->write(&p, "/tmp/x");
  EXPECT_FLOAT_EQ(p.rate, 0.0005f);
  EXPECT_EQ(p.count, 17);
  EXPECT_FALSE(p.on);
  EXPECT_EQ(p.shade, Shade::Light);
  EXPECT_EQ(p.path, "/tmp/x");
  EXPECT_EQ(find_setting(rows, "rate")->text_of(p), "0.0005");
}

TEST(Setting, RefusesWhatItDoesNotTakeInTheUsersTerms) {
  const std::vector<Setting> rows = part_rows();
  const Setting& rate = *find_setting(rows, "rate");
  EXPECT_EQ(rate.refusal("0.5"), "");
  EXPECT_EQ(rate.refusal("1"), "");
  EXPECT_EQ(rate.refusal("0"), "0 is out of range: it must be in (0, 1]; use e.g. --rate 0.1");
  EXPECT_EQ(rate.refusal("abc"), "'abc' is not a number; use e.g. --rate 0.1");
  EXPECT_EQ(rate.refusal("1e39"), "1e39 is out of range: it must be a finite float; use e.g. --rate 0.1");
  const Setting& count = *find_setting(rows, "count");
  EXPECT_EQ(count.refusal("99"), "");
  EXPECT_EQ(count.refusal("100"), "100 is out of range: it must be from 1 to 99");
  EXPECT_EQ(count.refusal("2.5"), "'2.5' is not a whole number");
  EXPECT_EQ(find_setting(rows, "on")->refusal("yes"), "'yes' is not 0 or 1");
  EXPECT_EQ(find_setting(rows, "shade")->refusal("grey"), "'grey' is not one of light, dark");
}

// A count whose 0 leaves the choice elsewhere (CpuOptions::threads): 0 is taken although the
// range starts at 1, and a refusal says so.
TEST(Setting, AZeroOutsideTheRangeIsTakenWhereTheRowSaysWhatItDoes) {
  struct Pool {
    int threads = 0;
  };
  const Setting row = count_setting<Pool>({.key = "threads", .member = "Pool::threads", .zero = "leave it"},
                                          &Pool::threads, {1, 8});
  EXPECT_EQ(row.refusal("0"), "");
  EXPECT_EQ(row.refusal("8"), "");
  EXPECT_EQ(row.refusal("9"), "9 is out of range: it must be from 1 to 8, or 0");
  EXPECT_EQ(row.refusal("-1"), "-1 is out of range: it must be from 1 to 8, or 0");
  Pool p;
  set_setting_number(row, &p, 5);
  EXPECT_EQ(p.threads, 5);
  EXPECT_EQ(setting_number(row, &p), 5);
}

// A 64-bit unsigned count (the seed) reads and writes values past a long long's.
TEST(Setting, AnUnsignedCountKeepsAll64Bits) {
  struct Run {
    uint64_t seed = 1;
  };
  const Setting row = count_setting<Run>({.key = "seed"}, &Run::seed, {0, kUint64Max});
  Run r;
  row.write(&r, "18446744073709551615");
  EXPECT_EQ(r.seed, 18446744073709551615ull);
  EXPECT_EQ(row.text_of(r), "18446744073709551615");
}

// A name held as text (a dataset format) is checked as a Choice.
TEST(Setting, ATextChoiceTakesOnlyItsNames) {
  struct Data {
    std::string format = "auto";
  };
  const Setting row = text_choice_setting<Data>({.key = "format"}, &Data::format, {"auto", "idx", "packed"});
  EXPECT_EQ(row.type, SettingType::Choice);
  EXPECT_EQ(row.refusal("idx"), "");
  EXPECT_EQ(row.refusal("png"), "'png' is not one of auto, idx, packed");
  Data d;
  row.write(&d, "packed");
  EXPECT_EQ(row.text_of(d), "packed");
}

TEST(Setting, OpenEndedRangesReadAsBounds) {
  EXPECT_EQ((SettingRange{0, kUnbounded, true}).text(SettingType::Real), "> 0");
  EXPECT_EQ((SettingRange{1, kUnbounded}).text(SettingType::Count), ">= 1");
  EXPECT_EQ((SettingRange{0, 1, false, true}).text(SettingType::Real), "in [0, 1)");
}

TEST(Setting, FixesNameTheFlagOrTheField) {
  const std::vector<Setting> rows = part_rows();
  EXPECT_EQ(find_setting(rows, "rate")->fix_for("0.2"), "--rate 0.2 (Part::rate)");
  EXPECT_EQ(find_setting(rows, "on")->fix_for("false"), "--no-on (Part::on)");
  Setting quiet = *find_setting(rows, "count");
  quiet.info.flag = nullptr;
  EXPECT_EQ(quiet.fix_for("3"), "3 as Part::count");
}

TEST(Setting, PartRowsWorkInsideTheWhole) {
  const std::vector<Setting> rows = settings_within(part_rows(), &Whole::part);
  Whole w;
  find_setting(rows, "count")->write(&w, "9");
  EXPECT_EQ(w.part.count, 9);
  EXPECT_EQ(w.other, 0);
  EXPECT_EQ(find_setting(rows, "count")->text_of(w), "9");
}

}  // namespace
}  // namespace kiln

// The CUDA backend's settings on the command line and in README.md, checked over the one table
// they come from (settings/cuda_settings.h): every field has its flag with its variable in --help, a
// number out of range is refused naming the flag, and README.md's table lists every field.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <string>

#include "settings/cuda_settings.h"
#include "support/kiln_cli.h"

namespace kiln {
namespace {

TEST(CudaOptionsCli, HelpListsEveryFieldWithItsVariable) {
  for (const char* command : {"train", "bench"}) {
    const testing::Result help = testing::kiln(std::string(command) + " --help");
    ASSERT_EQ(help.rc, 0) << help.output;
    for (const Setting& f : cuda_settings())
      testing::expect_contains(help, {std::string(f.info.flag) + " ", fmt::format("[{}]", f.info.env)}, command);
  }
}

TEST(CudaOptionsCli, NumbersOutOfRangeAreRefusedNamingTheFlag) {
  for (const Setting& f : cuda_settings()) {
    if (f.type == SettingType::Text) continue;
    const std::string args = fmt::format("train --device cpu --epochs 1 {} {}", f.info.flag, f.range.hi + 1);
    const testing::Result r = testing::kiln(args);
    EXPECT_NE(r.rc, 0) << args;
    testing::expect_contains(r, {f.info.flag, fmt::format("{}", f.range.hi + 1)}, args);
    EXPECT_EQ(r.output.find("epoch 1"), std::string::npos) << args << ": refused before training";
  }
}

// README.md's table of the settings: a row for each field, with its variable, flag and field name.
TEST(CudaOptionsCli, TuneByNameIsBoundedOrExhaustiveAndExcludesTheNumbers) {
  const testing::Result ok = testing::kiln("train --device cpu --epochs 1 --tune exhaustive --help");
  EXPECT_EQ(ok.rc, 0) << ok.output;
  testing::expect_contains(ok, {"--tune", "bounded|exhaustive"}, "train --help");
  const testing::Result unknown = testing::kiln("train --device cpu --epochs 1 --tune fastest");
  EXPECT_NE(unknown.rc, 0);
  testing::expect_contains(unknown, {"--tune", "fastest", "exhaustive"}, "--tune fastest");
  for (const char* both : {"--tune exhaustive --tune-plans 3", "--tune exhaustive --tune-budget-ms 100",
                           "--tune bounded --no-cudnn-tune"}) {
    const testing::Result r = testing::kiln(std::string("train --device cpu --epochs 1 ") + both);
    EXPECT_NE(r.rc, 0) << both;
    testing::expect_contains(r, {"excludes"}, both);
  }
}

TEST(CudaOptionsCli, ReadmeListsEveryField) {
  std::ifstream in(KILN_SOURCE_DIR "/README.md");
  ASSERT_TRUE(in) << "README.md";
  std::stringstream text;
  text << in.rdbuf();
  const std::string readme = text.str();
  for (const Setting& f : cuda_settings()) {
    SCOPED_TRACE(f.info.key);
    // A line of the GPU section's table opens with the variable (the settings table's name it
    // third).
    size_t row = readme.find(fmt::format("\n| `{}", f.info.env));
    ASSERT_NE(row, std::string::npos) << "README.md has no row for " << f.info.env;
    ++row;
    const std::string line = readme.substr(row, readme.find('\n', row) - row);
    EXPECT_NE(line.find(fmt::format("`{}", f.info.flag)), std::string::npos) << line;
    EXPECT_NE(line.find(fmt::format("`{}`", f.info.key)), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace kiln

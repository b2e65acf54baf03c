// The CUDA backend's settings on the command line and in README.md, checked over the one table
// they come from (ir/cuda_option_table.h): every field has its flag with its variable in --help, a
// number out of range is refused naming the flag, and README.md's table lists every field.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <string>

#include "ir/cuda_option_table.h"
#include "support/kiln_cli.h"

namespace kiln {
namespace {

TEST(CudaOptionsCli, HelpListsEveryFieldWithItsVariable) {
  for (const char* command : {"train", "bench"}) {
    const testing::Result help = testing::kiln(std::string(command) + " --help");
    ASSERT_EQ(help.rc, 0) << help.output;
    for (const CudaOptionField& f : cuda_option_fields())
      testing::expect_contains(help, {std::string(f.flag) + " ", fmt::format("[{}]", f.env)}, command);
  }
}

TEST(CudaOptionsCli, NumbersOutOfRangeAreRefusedNamingTheFlag) {
  for (const CudaOptionField& f : cuda_option_fields()) {
    if (f.type == CudaOptionField::Type::File) continue;
    const std::string args = fmt::format("train --device cpu --epochs 1 {} {}", f.flag, f.hi + 1);
    const testing::Result r = testing::kiln(args);
    EXPECT_NE(r.rc, 0) << args;
    testing::expect_contains(r, {f.flag, fmt::format("{}", f.hi + 1)}, args);
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
  for (const CudaOptionField& f : cuda_option_fields()) {
    SCOPED_TRACE(f.member);
    const size_t row = readme.find(fmt::format("| `{}", f.env));
    ASSERT_NE(row, std::string::npos) << "README.md has no row for " << f.env;
    const std::string line = readme.substr(row, readme.find('\n', row) - row);
    EXPECT_NE(line.find(fmt::format("`{}", f.flag)), std::string::npos) << line;
    EXPECT_NE(line.find(fmt::format("`{}`", f.member)), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace kiln

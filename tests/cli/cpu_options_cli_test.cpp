// The CPU backend's settings on the command line, checked over the table they come from
// (ir/cpu_option_table.h): every field has its flag in `train --help` and `bench --help`, with its
// range and its variable.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>

#include "ir/cpu_option_table.h"
#include "support/kiln_cli.h"

namespace kiln {
namespace {

TEST(CpuOptionsCli, HelpListsEveryFieldWithItsRangeAndVariable) {
  for (const char* command : {"train", "bench"}) {
    const testing::Result help = testing::kiln(std::string(command) + " --help");
    ASSERT_EQ(help.rc, 0) << help.output;
    for (const CpuOptionField& f : cpu_option_fields())
      testing::expect_contains(help, {std::string(f.flag) + " ", f.help, fmt::format("{} to {}", f.lo, f.hi()), f.env},
                               command);
  }
}

}  // namespace
}  // namespace kiln

// The CPU backend's settings on the command line, checked over the table they come from
// (settings/cpu_settings.h): every field has its flag in `train --help` and `bench --help`, with its
// range and its variable.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <string>

#include "settings/cpu_settings.h"
#include "support/kiln_cli.h"

namespace kiln {
namespace {

TEST(CpuOptionsCli, HelpListsEveryFieldWithItsRangeAndVariable) {
  for (const char* command : {"train", "bench"}) {
    const testing::Result help = testing::kiln(std::string(command) + " --help");
    ASSERT_EQ(help.rc, 0) << help.output;
    for (const Setting& f : cpu_settings())
      testing::expect_contains(
          help, {std::string(f.info.flag) + " ", f.info.help, fmt::format("{} to {}", f.range.lo, f.range.hi), f.info.env},
          command);
  }
}

}  // namespace
}  // namespace kiln

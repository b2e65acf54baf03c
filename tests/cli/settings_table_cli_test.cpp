// README.md's table of the settings is `kiln settings`' output, which the settings rows make
// (tools/cli/settings_command.h): a row added, removed or changed fails here until README.md holds
// the new table, which the failure prints.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "support/kiln_cli.h"

namespace kiln {
namespace {

TEST(SettingsTableCli, EveryRowIsALineWithItsFlagAndField) {
  const testing::Result r = testing::kiln("settings");
  ASSERT_EQ(r.rc, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  int rows = 0;
  for (int i = 0; std::getline(lines, line); ++i) {
    if (i < 2) continue;  // the header and its rule
    EXPECT_EQ(line.rfind("| `--", 0), 0u) << line;
    EXPECT_NE(line.find("::"), std::string::npos) << line << ": no field";
    ++rows;
  }
  // Some of every part: compile (--batch), training (--lr), an optimizer's (--momentum), data
  // (--image-size), CPU (--threads, KILN_THREADS), CUDA (--tune-plans, KILN_CUDNN_TUNE_PLANS).
  for (const char* part : {"| `--batch`, `-b` |", "| `--lr` |", "| `--momentum` |", "| `--image-size` |",
                           "| `--threads` | `CompileOptions::cpu.threads` | `KILN_THREADS` |",
                           "| `--tune-plans` | `CompileOptions::cuda.tune_plans` | `KILN_CUDNN_TUNE_PLANS` |"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << " in:\n" << r.output;
  EXPECT_GT(rows, 40);
}

TEST(SettingsTableCli, ReadmeHoldsTheTable) {
  const testing::Result r = testing::kiln("settings");
  ASSERT_EQ(r.rc, 0) << r.output;
  std::ifstream in(KILN_SOURCE_DIR "/README.md");
  ASSERT_TRUE(in) << "README.md";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find(r.output), std::string::npos)
      << "README.md's table of the settings (\"Every setting\") is not `kiln settings`' output; replace it with:\n"
      << r.output;
}

}  // namespace
}  // namespace kiln

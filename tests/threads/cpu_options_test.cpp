// CompileOptions::cpu.threads (kiln/options.h, the row of settings/cpu_settings.h): a CPU executable
// made with a count resizes the process's one pool, 0 leaves it as it is (KILN_THREADS, the cores,
// or what kiln::set_threads made it), and a count out of range is an error naming the field, the
// flag and the variable before anything is allocated.
#include <gtest/gtest.h>

#include <string>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "kiln/threads.h"
#include "settings/cpu_settings.h"
#include "support/cpu_test_util.h"
#include "support/scoped_threads.h"

namespace kiln {
namespace {

using testing::ScopedThreads;

Program tiny_program(int threads) {
  Blueprint m("tiny");
  m.input(8, 8, 1).conv(4, 3, 1, 1, false, "conv1").relu("relu1").flatten("flatten").fc(3, true, "fc");
  CompileOptions c;
  c.batch = 4;
  c.cpu.threads = threads;
  return compile(m, c);
}

TEST(CpuOptions, AnExecutableWithAThreadCountSizesThePool) {
  ScopedThreads restore(kiln::threads());
  Executable three(tiny_program(3), 1);
  EXPECT_EQ(kiln::threads(), 3);
  // The pool is the process's: the last executable made with a count sets it for all of them.
  Executable two(tiny_program(2), 1);
  EXPECT_EQ(kiln::threads(), 2);
}

TEST(CpuOptions, ZeroLeavesThePoolAsItIs) {
  ScopedThreads scope(5);  // as kiln::set_threads(5) in an API user's program
  Executable exe(tiny_program(0), 1);
  EXPECT_EQ(kiln::threads(), 5);
  EXPECT_EQ(CompileOptions{}.cpu.threads, 0);  // the default leaves KILN_THREADS in charge
}

TEST(CpuOptions, CountsOutOfRangeAreErrorsNamingTheFieldFlagAndVariable) {
  ScopedThreads scope(2);
  const std::string cap = std::to_string(max_threads());
  for (int bad : {-1, max_threads() + 1}) {
    SCOPED_TRACE(bad);
    testing::expect_error([&] { Executable exe(tiny_program(bad), 1); },
                          {"CompileOptions::cpu.threads = " + std::to_string(bad), "from 1 to " + cap, "--threads",
                           "KILN_THREADS"});
    EXPECT_EQ(kiln::threads(), 2);  // a refused count leaves the pool as it was
  }
}

// Every row's range: its least value and the machine's cap are accepted, one past either refused.
TEST(CpuOptions, TheTableChecksEveryRowsRange) {
  for (const Setting& f : cpu_settings()) {
    SCOPED_TRACE(f.info.key);
    CpuOptions o;
    const int lo = int(f.range.lo), hi = int(f.range.hi);
    for (int good : {0, lo, hi}) {
      set_setting_number(f, &o, good);
      EXPECT_EQ(setting_number(f, &o), good);
      check_cpu_options(o);
    }
    for (int bad : {lo - 1 == 0 ? -1 : lo - 1, hi + 1}) {
      set_setting_number(f, &o, bad);
      testing::expect_error([&] { check_cpu_options(o); },
                            {std::string("cpu.") + f.info.key, f.info.flag, f.info.env});
    }
  }
}

}  // namespace
}  // namespace kiln

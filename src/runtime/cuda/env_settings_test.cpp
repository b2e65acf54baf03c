// Environment settings of the CUDA backend (no GPU needed): defaults, values, and errors that name
// the variable.
#include "runtime/cuda/env_settings.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "ops/common/cpu_test_util.h"

namespace kiln::cuda {
namespace {

constexpr const char* kName = "KILN_TEST_ENV_SETTING";

// Sets the variable for one test; unset again afterwards.
struct ScopedEnv {
  explicit ScopedEnv(const char* value) { setenv(kName, value, 1); }
  ~ScopedEnv() { unsetenv(kName); }
};

TEST(EnvSettings, UnsetOrEmptyGivesTheFallback) {
  unsetenv(kName);
  EXPECT_FALSE(env_text(kName).has_value());
  EXPECT_EQ(env_int(kName, 1, 99, 7, "a count"), 7);
  ScopedEnv empty("");
  EXPECT_FALSE(env_text(kName).has_value());
  EXPECT_EQ(env_int(kName, 1, 99, 7, "a count"), 7);
}

TEST(EnvSettings, NumbersInRangeAreRead) {
  ScopedEnv four("4");
  EXPECT_EQ(env_text(kName), "4");
  EXPECT_EQ(env_int(kName, 1, 99, 1, "a count"), 4);
  EXPECT_EQ(env_int(kName, 4, 4, 1, "a count"), 4);
}

TEST(EnvSettings, AnythingElseIsAnErrorNamingTheVariableAndTheRange) {
  for (const char* bad : {"two", "-1", "0", "100", "4x", " 4", "1e3", "9999999999999"}) {
    ScopedEnv env(bad);
    SCOPED_TRACE(bad);
    kiln::testing::expect_error([] { env_int(kName, 1, 99, 1, "a slice count"); },
                                {kName, "a slice count", "a whole number from 1 to 99"});
  }
}

}  // namespace
}  // namespace kiln::cuda

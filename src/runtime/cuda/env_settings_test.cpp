// Settings of the CUDA backend (no GPU needed): the environment variables (defaults, values, and
// errors that name the variable), their overrides of CompileOptions::cuda, and the option checks.
#include "runtime/cuda/env_settings.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <deque>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "settings/cuda_settings.h"
#include "support/cpu_test_util.h"
#include "support/scoped_env.h"

namespace kiln::cuda {
namespace {

constexpr const char* kName = "KILN_TEST_ENV_SETTING";

using testing::ScopedEnv;

TEST(EnvSettings, UnsetOrEmptyGivesTheFallback) {
  unsetenv(kName);
  EXPECT_FALSE(env_text(kName).has_value());
  EXPECT_EQ(env_int(kName, 1, 99, 7, "a count"), 7);
  ScopedEnv empty(kName, "");
  EXPECT_FALSE(env_text(kName).has_value());
  EXPECT_EQ(env_int(kName, 1, 99, 7, "a count"), 7);
}

TEST(EnvSettings, NumbersInRangeAreRead) {
  ScopedEnv four(kName, "4");
  EXPECT_EQ(env_text(kName), "4");
  EXPECT_EQ(env_int(kName, 1, 99, 1, "a count"), 4);
  EXPECT_EQ(env_int(kName, 4, 4, 1, "a count"), 4);
}

TEST(EnvSettings, AnythingElseIsAnErrorNamingTheVariableAndTheRange) {
  for (const char* bad : {"two", "-1", "0", "100", "4x", " 4", "1e3", "9999999999999"}) {
    ScopedEnv env(kName, bad);
    SCOPED_TRACE(bad);
    kiln::testing::expect_error([] { env_int(kName, 1, 99, 1, "a slice count"); },
                                {kName, "a slice count", "a whole number from 1 to 99"});
  }
}

// The variables of CudaOptions (the rows of settings/cuda_settings.h): saved and unset for one test (so that a
// variable set where the tests run, e.g. by scripts/gpu_check.sh, changes nothing here), restored
// afterwards.
class CudaEnvOverrides : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const Setting& f : cuda_settings()) unset_.emplace_back(f.info.env, nullptr);
  }
  void TearDown() override { unset_.clear(); }

 private:
  std::deque<ScopedEnv> unset_;
};

CudaOptions non_default_options() {
  CudaOptions o;
  o.tune = false, o.tune_plans = 3, o.plan_cache = "plans.json", o.tune_log = "tune.jsonl";
  o.graphs = false, o.tune_runs = 4, o.cutlass = false, o.conv_tf32 = true;
  return o;
}

// Every field of the rows equal.
void expect_same(const CudaOptions& a, const CudaOptions& b) {
  for (const Setting& f : cuda_settings()) EXPECT_EQ(f.text_of(a), f.text_of(b)) << f.info.key;
}

TEST_F(CudaEnvOverrides, UnsetOrEmptyVariablesKeepTheOptions) {
  expect_same(with_env_overrides(CudaOptions{}), CudaOptions{});
  expect_same(with_env_overrides(non_default_options()), non_default_options());
  for (const Setting& f : cuda_settings()) setenv(f.info.env, "", 1);
  expect_same(with_env_overrides(non_default_options()), non_default_options());
}

TEST_F(CudaEnvOverrides, EachVariableReplacesItsField) {
  setenv("KILN_CUDNN_TUNE", "0", 1);
  setenv("KILN_CUDNN_TUNE_PLANS", "12", 1);
  setenv("KILN_PLAN_CACHE", "/tmp/cache.json", 1);
  setenv("KILN_TUNE_LOG", "/tmp/log.jsonl", 1);
  setenv("KILN_CUDA_GRAPHS", "0", 1);
  setenv("KILN_CUDNN_TIMED_RUNS", "2", 1);
  setenv("KILN_CUTLASS", "0", 1);
  setenv("KILN_CONV_TF32", "1", 1);
  CudaOptions want;
  want.tune = false, want.tune_plans = 12, want.plan_cache = "/tmp/cache.json", want.tune_log = "/tmp/log.jsonl";
  want.graphs = false, want.tune_runs = 2, want.cutlass = false, want.conv_tf32 = true;
  expect_same(with_env_overrides(CudaOptions{}), want);

  // 1 turns on what the options turned off: the variables override both ways.
  setenv("KILN_CUDNN_TUNE", "1", 1);
  setenv("KILN_CUDA_GRAPHS", "1", 1);
  setenv("KILN_CUTLASS", "1", 1);
  setenv("KILN_CONV_TF32", "0", 1);
  const CudaOptions on = with_env_overrides(non_default_options());
  EXPECT_TRUE(on.tune);
  EXPECT_TRUE(on.graphs);
  EXPECT_TRUE(on.cutlass);
  EXPECT_FALSE(on.conv_tf32);  // 0 turns off what the options turned on
  EXPECT_EQ(on.tune_plans, 12);
}

// Over every row: each variable, set alone to a value its field does not hold, changes that field
// to it and nothing else.
TEST_F(CudaEnvOverrides, EveryFieldOfTheRowsHasItsVariable) {
  for (const Setting& f : cuda_settings()) {
    SCOPED_TRACE(f.info.env);
    const CudaOptions base;
    CudaOptions want = base;
    std::string text;
    if (f.type == SettingType::Text) {
      text = "/tmp/kiln-" + std::string(f.info.key);
      f.write(&want, text);
      EXPECT_EQ(f.text_of(want), text);
    } else {
      const int lo = int(f.range.lo), hi = int(f.range.hi);
      const int v = setting_number(f, &base) == hi ? lo : hi;
      text = std::to_string(v);
      set_setting_number(f, &want, v);
    }
    setenv(f.info.env, text.c_str(), 1);
    expect_same(with_env_overrides(base), want);
    unsetenv(f.info.env);
  }
}

TEST_F(CudaEnvOverrides, MalformedValuesAreErrorsNamingTheVariable) {
  std::vector<std::vector<std::string>> cases = {
      {"KILN_CUDNN_TUNE", "yes", "from 0 to 1"},        {"KILN_CUDNN_TUNE", "2", "from 0 to 1"},
      {"KILN_CUDNN_TUNE_PLANS", "-1", "from 0 to 9999"}, {"KILN_CUDNN_TUNE_PLANS", "10000", "from 0 to 9999"},
      {"KILN_CUDA_GRAPHS", "off", "from 0 to 1"},       {"KILN_CUDNN_TIMED_RUNS", "0", "from 1 to 100"},
      {"KILN_CUDNN_TIMED_RUNS", "two", "from 1 to 100"}, {"KILN_CUTLASS", "2", "from 0 to 1"},
      {"KILN_CONV_TF32", "yes", "from 0 to 1"},
  };
  for (const Setting& f : cuda_settings())  // and a value past every number's range
    if (f.type != SettingType::Text)
      cases.push_back({f.info.env, fmt::format("{}", f.range.hi + 1), fmt::format("from {} to {}", f.range.lo, f.range.hi)});
  for (const auto& c : cases) {
    SCOPED_TRACE(c[0] + "=" + c[1]);
    setenv(c[0].c_str(), c[1].c_str(), 1);
    kiln::testing::expect_error([] { with_env_overrides(CudaOptions{}); }, {c[0], "'" + c[1] + "'", c[2]});
    unsetenv(c[0].c_str());
  }
}

TEST(CudaOptionsCheck, FieldsOutOfRangeAreErrorsNamingTheField) {
  check_cuda_options(CudaOptions{});
  check_cuda_options(non_default_options());
  CudaOptions o;
  o.tune_plans = -1;
  kiln::testing::expect_error([&] { check_cuda_options(o); }, {"cuda.tune_plans", "-1", "9999"});
  o.tune_plans = 9999;
  check_cuda_options(o);
  o.tune_runs = 0;
  kiln::testing::expect_error([&] { check_cuda_options(o); }, {"cuda.tune_runs", "0", "100"});
  o.tune_runs = 101;
  kiln::testing::expect_error([&] { check_cuda_options(o); },
                              {"cuda.tune_runs", "101", "100", "KILN_CUDNN_TIMED_RUNS", "--tune-runs"});
}

}  // namespace
}  // namespace kiln::cuda

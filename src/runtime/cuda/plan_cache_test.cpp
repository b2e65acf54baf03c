// The plan cache file on its own (no GPU): round trip, merging writers, replacement, and errors
// that name the file for everything that is not a plan cache.
#include "runtime/cuda/plan_cache.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "kiln/error.h"
#include "support/cpu_test_util.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace kiln::cuda {
namespace {

class PlanCacheFile : public ::testing::Test {
 protected:
  std::string file() const { return (dir_.path() / "sub" / "plans.json").string(); }
  void write_text(const std::string& text) const {
    std::filesystem::create_directories(dir_.path() / "sub");
    std::ofstream(file()) << text;
  }
  kiln::testing::TempDir dir_;
};

CachedPlan plan(int64_t engine, double ms) {
  CachedPlan p;
  p.name = "eng" + std::to_string(engine) + "_k2=6_k6=3_k22=1";
  p.ms = ms, p.workspace = 7865055;
  return p;
}

void expect_same(const CachedPlan& got, const CachedPlan& want) {
  EXPECT_EQ(got.name, want.name);
  EXPECT_DOUBLE_EQ(got.ms, want.ms);
  EXPECT_EQ(got.workspace, want.workspace);
}

TEST_F(PlanCacheFile, MissingFileIsEmptyAndStoreCreatesItsFolder) {
  PlanCache cache(file());
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.find("a").has_value());
  cache.store("a", plan(62, 1.25));
  EXPECT_TRUE(std::filesystem::exists(file()));
  EXPECT_FALSE(std::filesystem::exists(file() + ".tmp." + std::to_string(::getpid())));
}

TEST_F(PlanCacheFile, EntriesSurviveAReload) {
  {
    PlanCache cache(file());
    cache.store("H200|CONV_DGRAD|N=256", plan(67, 1.19));
    cache.store("H200|CONV_WGRAD|N=256", plan(65, 1.22));
  }
  PlanCache again(file());
  ASSERT_EQ(again.size(), 2u);
  expect_same(*again.find("H200|CONV_DGRAD|N=256"), plan(67, 1.19));
  expect_same(*again.find("H200|CONV_WGRAD|N=256"), plan(65, 1.22));
}

TEST_F(PlanCacheFile, TwoWritersKeepEachOthersEntries) {
  PlanCache first(file()), second(file());  // both read an empty cache
  first.store("x", plan(1, 1.0));
  second.store("y", plan(2, 2.0));  // merges x from the file before writing
  PlanCache third(file());
  EXPECT_EQ(third.size(), 2u);
  expect_same(*third.find("x"), plan(1, 1.0));
  expect_same(*third.find("y"), plan(2, 2.0));
}

TEST_F(PlanCacheFile, ProcessesWritingAtOnceLoseNoEntry) {
  // The cache is shared by every run on the machine: several processes tuning at once each add
  // their graphs. Without the writer lock, one's read-merge-rename can land between another's read
  // and rename and drop its entries (this test then loses some of the 6 x 25).
  constexpr int kProcesses = 6, kEntries = 25;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int rc = 0;
      try {
        PlanCache mine(file());
        for (int e = 0; e < kEntries; ++e) mine.store(fmt::format("p{}e{}", p, e), plan(p, e));
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  PlanCache all(file());
  EXPECT_EQ(all.size(), size_t{kProcesses * kEntries});
  for (int p = 0; p < kProcesses; ++p)
    for (int e = 0; e < kEntries; ++e)
      EXPECT_TRUE(all.find(fmt::format("p{}e{}", p, e)).has_value()) << p << " " << e;
}

TEST(DefaultPlanCache, IsInTheUsersCacheFolder) {
  {
    kiln::testing::ScopedEnv xdg("XDG_CACHE_HOME", "/data/cache"), home("HOME", "/home/ana");
    EXPECT_EQ(default_plan_cache_path(), "/data/cache/kiln/cudnn-plans.json");
  }
  {
    // A relative XDG_CACHE_HOME is invalid by the XDG rules and ignored.
    kiln::testing::ScopedEnv xdg("XDG_CACHE_HOME", "cache"), home("HOME", "/home/ana");
    EXPECT_EQ(default_plan_cache_path(), "/home/ana/.cache/kiln/cudnn-plans.json");
  }
  {
    kiln::testing::ScopedEnv xdg("XDG_CACHE_HOME", nullptr), home("HOME", nullptr);
    EXPECT_EQ(default_plan_cache_path(), "");
  }
}

TEST_F(PlanCacheFile, ABoundedChoiceIsMarkedSoExhaustiveTuningReplacesIt) {
  CachedPlan bounded = plan(3, 1.5), exhaustive = plan(4, 1.4);
  exhaustive.exhaustive = true;
  {
    PlanCache cache(file());
    cache.store("b", bounded);
    cache.store("e", exhaustive);
  }
  PlanCache again(file());
  EXPECT_FALSE(again.find("b")->exhaustive);
  EXPECT_TRUE(again.find("e")->exhaustive);
  // A file written before the mark existed reads as bounded choices.
  write_text(R"({"format": "kiln-plan-cache", "version": 2, "plans": {"k": {"name": "eng1", "ms": 1, "workspace": 0}}})");
  EXPECT_FALSE(PlanCache(file()).find("k")->exhaustive);
}

TEST_F(PlanCacheFile, StoreReplacesAndForgetRemoves) {
  PlanCache cache(file());
  cache.store("k", plan(1, 3.0));
  cache.store("k", plan(2, 2.0));
  expect_same(*PlanCache(file()).find("k"), plan(2, 2.0));
  cache.forget("k");
  EXPECT_FALSE(PlanCache(file()).find("k").has_value());
}

void expect_error_naming(const std::string& path, const std::string& words) {
  kiln::testing::expect_error([&] { PlanCache cache(path); }, {path, words});
}

TEST_F(PlanCacheFile, FilesThatAreNotPlanCachesAreErrorsNamingThem) {
  write_text("{ not json");
  expect_error_naming(file(), "delete it");
  write_text(R"({"format": "something-else", "version": 1, "plans": {}})");
  expect_error_naming(file(), "not a kiln plan cache");
  write_text(R"({"format": "kiln-plan-cache", "version": 99, "plans": {}})");
  expect_error_naming(file(), "version 99");
  write_text(R"({"format": "kiln-plan-cache", "version": 1, "plans": {}})");
  expect_error_naming(file(), "version 1");
  write_text(R"({"format": "kiln-plan-cache", "version": 2, "plans": {"k": {"ms": 3}}})");
  expect_error_naming(file(), "not readable");
  write_text(R"({"format": "kiln-plan-cache", "version": 2, "plans": {"k": {"name": "", "ms": 0, "workspace": 0}}})");
  expect_error_naming(file(), "empty plan name");
  EXPECT_THROW(PlanCache(""), kiln::Error);
}

TEST_F(PlanCacheFile, AnUnwritableFolderIsAnErrorAndLeavesNoFile) {
  std::ofstream(dir_.file("blocker")) << "a file where a folder should be";
  const std::string path = (dir_.path() / "blocker" / "plans.json").string();
  PlanCache cache(path);  // nothing to read yet
  EXPECT_THROW(cache.store("k", plan(1, 1.0)), kiln::Error);
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace kiln::cuda

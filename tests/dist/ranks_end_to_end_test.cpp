// The CPU side of a data-parallel run whole: the launcher starts this test binary once per rank,
// each rank reads its place from the environment and joins the others over TCP, and a rank that
// crashes is named by the others and by the launcher.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dist/launch_ranks.h"
#include "dist/rendezvous.h"
#include "kiln/data_parallel.h"
#include "support/cpu_test_util.h"
#include "support/scoped_env.h"

namespace kiln {
namespace {

using testing::contains;

// The variable that makes RankProcess.Joins act, and which rank crashes after joining ("-1": none).
constexpr const char* kRoleVariable = "KILN_TEST_RANK_THAT_CRASHES";
// The exit statuses of a rank process: told of the crashed rank (as NCCL's lost-peer exit), or not.
constexpr int kCrashed = 9, kToldOfCrash = 3, kToldOfAnother = 20, kNeverTold = 21, kWrongBlob = 10;

std::vector<uint8_t> id_blob() {
  std::vector<uint8_t> blob(128);
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = uint8_t(255 - i);
  return blob;
}

// Not a test alone: the body of each rank that RanksEndToEnd starts (this binary again).
TEST(RankProcess, Joins) {
  const char* role = std::getenv(kRoleVariable);
  if (role == nullptr) GTEST_SKIP() << "a rank of the RanksEndToEnd tests, which start it";
  const int crashes = std::atoi(role);
  // As kiln train takes the launcher's SIGTERM (sent once a rank fails) for a clean stop at the
  // next step, not an end: what ends a rank is hearing of the crash. From the start, since the
  // crash may come before this rank has joined.
  ::signal(SIGTERM, SIG_IGN);
  const std::optional<RankEnv> env = rank_env_from_environment();
  ASSERT_TRUE(env.has_value());
  dist::Rendezvous rendezvous(*env, 10);
  if (rendezvous.share(env->rank == 0 ? id_blob() : std::vector<uint8_t>{}) != id_blob()) std::_Exit(kWrongBlob);
  if (env->rank == crashes) std::_Exit(kCrashed);  // no finish(): its sockets close as a crash's do
  if (crashes < 0) {  // every rank ends as planned (the destructor finishes): none may hear of a loss
    rendezvous.watch([](int, const std::string& why) {
      std::fprintf(stderr, "rank process: %s\n", why.c_str());
      std::_Exit(kToldOfAnother);
    });
    return;
  }
  rendezvous.watch([crashes](int lost, const std::string& why) {
    std::fprintf(stderr, "rank process: %s\n", why.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // as NCCL's abort takes a while
    std::_Exit(lost == crashes ? kToldOfCrash : kToldOfAnother);
  });
  std::this_thread::sleep_for(std::chrono::seconds(10));
  std::_Exit(kNeverTold);
}

dist::LaunchResult launch_this_binary(int ranks) {
  dist::LaunchSpec spec;
  for (int i = 0; i < ranks; ++i) spec.gpus.push_back(i);
  // gtest's chatter from every rank would bury the test's own (errors still reach stderr), and a
  // rank must neither write this run's report nor be sharded away from its one test.
  spec.command = {"/bin/sh", "-c",
                  "unset GTEST_OUTPUT GTEST_SHARD_INDEX GTEST_TOTAL_SHARDS; "
                  "exec \"$0\" --gtest_filter=RankProcess.Joins >/dev/null",
                  std::filesystem::read_symlink("/proc/self/exe").string()};
  spec.grace_seconds = 2;
  return dist::launch_ranks(spec);
}

TEST(RanksEndToEnd, ThreeRanksJoinAndEndAsPlanned) {
  testing::ScopedEnv role(kRoleVariable, "-1");
  const dist::LaunchResult r = launch_this_binary(3);
  EXPECT_EQ(r.exit_code, 0) << r.report;
}

TEST(RanksEndToEnd, CrashedRankIsNamedByTheOthersAndTheLauncher) {
  testing::ScopedEnv role(kRoleVariable, "1");
  const dist::LaunchResult r = launch_this_binary(3);
  EXPECT_EQ(r.exit_code, kCrashed) << r.report;
  EXPECT_TRUE(contains(r.report, "rank 1 (GPU 1) failed first: exit status 9")) << r.report;
  EXPECT_TRUE(contains(r.report, "rank 0 exit status 3")) << r.report;  // rank 0 saw it
  EXPECT_TRUE(contains(r.report, "rank 2 exit status 3")) << r.report;  // rank 2 was told by rank 0
}

TEST(RanksEndToEnd, CrashedRank0IsNamedByTheOthers) {
  testing::ScopedEnv role(kRoleVariable, "0");
  const dist::LaunchResult r = launch_this_binary(2);
  EXPECT_EQ(r.exit_code, kCrashed) << r.report;
  EXPECT_TRUE(contains(r.report, "rank 0 (GPU 0) failed first: exit status 9")) << r.report;
  EXPECT_TRUE(contains(r.report, "rank 1 exit status 3")) << r.report;
}

}  // namespace
}  // namespace kiln

// The launcher with /bin/sh scripts as ranks: the environment each gets, the first failure
// stopping the others (SIGTERM, then SIGKILL after the grace), signals passed on; and the parsing
// and checks of its options.
#include "dist/launch_ranks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/cpu_test_util.h"
#include "support/scoped_env.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

using dist::LaunchResult;
using dist::LaunchSpec;
using testing::contains;
using testing::expect_error;
using testing::ScopedEnv;
using testing::TempDir;

// `ranks` ranks, each running `script` with /bin/sh; a short grace so the tests stay quick.
LaunchSpec shell_ranks(const std::string& script, int ranks) {
  LaunchSpec spec;
  for (int i = 0; i < ranks; ++i) spec.gpus.push_back(i);
  spec.command = {"/bin/sh", "-c", script};
  spec.grace_seconds = 1;
  return spec;
}

struct TimedLaunch {
  LaunchResult result;
  double seconds;
};

TimedLaunch timed_launch(const LaunchSpec& spec) {
  const auto start = std::chrono::steady_clock::now();
  LaunchResult result = dist::launch_ranks(spec);
  return {result, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

std::map<std::string, std::string> read_environment(const std::string& path) {
  std::map<std::string, std::string> vars;
  std::istringstream lines(testing::read_text(path));
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) vars[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return vars;
}

TEST(LaunchRanks, AllRanksExitingZeroSucceed) {
  const LaunchResult r = dist::launch_ranks(shell_ranks("exit 0", 3));
  EXPECT_EQ(r.exit_code, 0) << r.report;
  EXPECT_TRUE(contains(r.report, "all 3 rank(s) exited 0")) << r.report;
}

TEST(LaunchRanks, EachRankGetsItsPlaceInTheEnvironment) {
  TempDir dir;
  ScopedEnv stale_rank("RANK", "7");  // the launcher's own values are replaced
  ScopedEnv no_nvls("NCCL_NVLS_ENABLE", nullptr);
  LaunchSpec spec = shell_ranks("env > '" + dir.file("rank") + "'$RANK.env", 2);
  spec.gpus = {3, 5};
  spec.nodes = 2, spec.node_rank = 1;
  spec.master_addr = "10.1.2.3", spec.master_port = 29555;
  const LaunchResult r = dist::launch_ranks(spec);
  ASSERT_EQ(r.exit_code, 0) << r.report;
  for (int local = 0; local < 2; ++local) {
    const int rank = 2 + local;
    std::map<std::string, std::string> env = read_environment(dir.file("rank" + std::to_string(rank) + ".env"));
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"], "10.1.2.3");
    EXPECT_EQ(env["MASTER_PORT"], "29555");
    EXPECT_EQ(env["KILN_RANK_DEVICE"], local == 0 ? "3" : "5");
    EXPECT_EQ(env["NCCL_NVLS_ENABLE"], "0");
  }
}

TEST(LaunchRanks, KeepsNvlsSettingAndPicksAPort) {
  TempDir dir;
  ScopedEnv nvls("NCCL_NVLS_ENABLE", "1");
  const LaunchResult r = dist::launch_ranks(shell_ranks("env > '" + dir.file("rank") + "'$RANK.env", 1));
  ASSERT_EQ(r.exit_code, 0) << r.report;
  std::map<std::string, std::string> env = read_environment(dir.file("rank0.env"));
  EXPECT_EQ(env["NCCL_NVLS_ENABLE"], "1");
  const int port = std::stoi(env["MASTER_PORT"]);
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
  EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
}

TEST(LaunchRanks, FirstFailureStopsTheOthers) {
  const TimedLaunch t = timed_launch(shell_ranks("if [ $RANK = 1 ]; then sleep 0.2; exit 3; fi; sleep 30", 3));
  EXPECT_EQ(t.result.exit_code, 3) << t.result.report;
  EXPECT_LT(t.seconds, 15);
  EXPECT_TRUE(contains(t.result.report, "rank 1 (GPU 1) failed first: exit status 3")) << t.result.report;
  EXPECT_TRUE(contains(t.result.report, "sent SIGTERM")) << t.result.report;
  EXPECT_TRUE(contains(t.result.report, "rank 0 signal SIGTERM")) << t.result.report;
  EXPECT_TRUE(contains(t.result.report, "rank 2 signal SIGTERM")) << t.result.report;
}

TEST(LaunchRanks, RankKilledBySignalFailsWith128PlusIt) {
  const LaunchResult r = dist::launch_ranks(shell_ranks("if [ $RANK = 0 ]; then kill -SEGV $$; fi; sleep 30", 2));
  EXPECT_EQ(r.exit_code, 128 + SIGSEGV) << r.report;
  EXPECT_TRUE(contains(r.report, "rank 0 (GPU 0) failed first: signal SIGSEGV")) << r.report;
}

TEST(LaunchRanks, RankIgnoringSigtermIsKilledAfterTheGrace) {
  const TimedLaunch t =
      timed_launch(shell_ranks("if [ $RANK = 0 ]; then sleep 0.3; exit 4; fi; trap '' TERM; sleep 30", 2));
  EXPECT_EQ(t.result.exit_code, 4) << t.result.report;
  EXPECT_GE(t.seconds, 1.0);  // the grace
  EXPECT_LT(t.seconds, 15);
  EXPECT_TRUE(contains(t.result.report, "rank 1 signal SIGKILL after the 1 s grace")) << t.result.report;
}

TEST(LaunchRanks, PassesSigintOnToEveryRank) {
  struct sigaction current {};
  ::sigaction(SIGINT, nullptr, &current);
  if (current.sa_handler == SIG_IGN) GTEST_SKIP() << "SIGINT is ignored in this process, so the launcher keeps it so";
  TempDir dir;
  std::thread interrupter([&] {
    // Once both ranks run (the launcher's handlers are in place before the first starts).
    for (int i = 0; i < 500; ++i) {
      if (std::filesystem::exists(dir.file("started0")) && std::filesystem::exists(dir.file("started1"))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::kill(::getpid(), SIGINT);
  });
  const TimedLaunch t = timed_launch(shell_ranks("touch '" + dir.file("started") + "'$RANK; exec sleep 30", 2));
  interrupter.join();
  EXPECT_LT(t.seconds, 15);
  EXPECT_EQ(t.result.exit_code, 128 + SIGINT) << t.result.report;
  EXPECT_TRUE(contains(t.result.report, "SIGINT was passed on to every rank")) << t.result.report;
  EXPECT_TRUE(contains(t.result.report, "rank 0 signal SIGINT")) << t.result.report;
  EXPECT_TRUE(contains(t.result.report, "rank 1 signal SIGINT")) << t.result.report;
  // The launcher's handler is gone again.
  ::sigaction(SIGINT, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
}

TEST(LaunchRanks, ProgramThatCannotRunIsAnError) {
  LaunchSpec spec = shell_ranks("", 2);
  spec.command = {"/nonexistent/kiln-no-such-program", "--flag"};
  expect_error([&] { dist::launch_ranks(spec); },
               {"rank 0 (GPU 0): cannot run '/nonexistent/kiln-no-such-program'", "No such file"});
}

TEST(ParseGpuList, CountsAndOrdinals) {
  EXPECT_EQ(dist::parse_gpu_list("2"), (std::vector<int>{0, 1}));
  EXPECT_EQ(dist::parse_gpu_list("1"), (std::vector<int>{0}));
  EXPECT_EQ(dist::parse_gpu_list("0,2"), (std::vector<int>{0, 2}));
  EXPECT_EQ(dist::parse_gpu_list(" 3, 1 "), (std::vector<int>{3, 1}));
}

TEST(ParseGpuList, ErrorsNameTheTextAndTheFix) {
  const auto bad = [](const std::string& text, const std::vector<std::string>& parts) {
    expect_error([&] { dist::parse_gpu_list(text); }, parts);
  };
  bad("", {"--gpus is empty", "--gpus 0,2"});
  bad("0", {"--gpus '0' asks for no GPU", "leave out --gpus"});
  bad("-1", {"--gpus '-1'", "negative"});
  bad("1,-2", {"--gpus '1,-2'", "'-2' is negative"});
  bad("two", {"--gpus 'two'", "'two' is not a GPU ordinal", "--gpus 2"});
  bad("1.5", {"'1.5' is not a GPU ordinal"});
  bad("0,0", {"--gpus '0,0' names GPU 0 twice"});
  bad("0,,1", {"--gpus '0,,1' has an empty entry"});
  bad("1,", {"--gpus '1,' has an empty entry"});
  bad("5000", {"--gpus '5000'", "more GPUs than a machine has"});
  bad("99999999999", {"'99999999999' is not a GPU ordinal"});
}

TEST(ParseMaster, HostAndPort) {
  EXPECT_EQ(dist::parse_master("10.0.0.1:29500"), (std::pair<std::string, int>{"10.0.0.1", 29500}));
  EXPECT_EQ(dist::parse_master("node-0.cluster:1"), (std::pair<std::string, int>{"node-0.cluster", 1}));
  EXPECT_EQ(dist::parse_master("[fd00::1]:65535"), (std::pair<std::string, int>{"fd00::1", 65535}));
}

TEST(ParseMaster, ErrorsNameTheTextAndTheFix) {
  const auto bad = [](const std::string& text, const std::vector<std::string>& parts) {
    expect_error([&] { dist::parse_master(text); }, parts);
  };
  bad("", {"--master is empty", "10.0.0.1:29500"});
  bad("node0", {"--master 'node0' has no port", "HOST:PORT"});
  bad(":29500", {"--master ':29500' names no host"});
  bad("node0:0", {"--master 'node0:0'", "'0' is not a TCP port"});
  bad("node0:65536", {"'65536' is not a TCP port"});
  bad("node0:http", {"'http' is not a TCP port"});
  bad("fd00::1:29500", {"IPv6 address in brackets"});
  bad("[fd00::1]29500", {"is not [IPv6-ADDRESS]:PORT"});
}

TEST(CheckLaunchSpec, AcceptsAGoodSpec) {
  LaunchSpec spec = shell_ranks("true", 2);
  dist::check_launch_spec(spec);
  spec.nodes = 2, spec.node_rank = 1, spec.master_addr = "10.0.0.1", spec.master_port = 29500;
  dist::check_launch_spec(spec);
}

TEST(CheckLaunchSpec, ErrorsNameTheOption) {
  const auto bad = [](LaunchSpec spec, const std::vector<std::string>& parts) {
    expect_error([&] { dist::check_launch_spec(spec); }, parts);
  };
  const LaunchSpec good = shell_ranks("true", 2);
  LaunchSpec s = good;
  s.gpus.clear();
  bad(s, {"--gpus names no GPU"});
  s = good, s.gpus = {1, 1};
  bad(s, {"--gpus names GPU 1 twice"});
  s = good, s.gpus = {0, -1};
  bad(s, {"--gpus: GPU -1 is negative"});
  s = good, s.command.clear();
  bad(s, {"command is empty"});
  s = good, s.nodes = 0;
  bad(s, {"--nodes 0"});
  s = good, s.nodes = 2, s.node_rank = 2, s.master_port = 29500;
  bad(s, {"--node-rank 2 is outside 0 to 1", "--nodes 2"});
  s = good, s.node_rank = -1;
  bad(s, {"--node-rank -1"});
  s = good, s.nodes = 2;
  bad(s, {"--nodes 2 needs --master HOST:PORT"});
  s = good, s.master_port = 70000;
  bad(s, {"--master port 70000"});
}

TEST(FreeTcpPort, IsAPort) {
  const int port = dist::free_tcp_port();
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
}

}  // namespace
}  // namespace kiln

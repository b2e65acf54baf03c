// The ranks' TCP rendezvous on this machine: ranks as threads (or, where one must die without a
// goodbye, as a forked child that exits), on a free port, with short timeouts.
#include "dist/rendezvous.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/launch_ranks.h"
#include "support/cpu_test_util.h"

namespace kiln {
namespace {

using dist::Rendezvous;
using testing::contains;
using testing::expect_error;

RankEnv rank_env(int rank, int ranks, int port) {
  RankEnv env;
  env.rank = rank, env.ranks = ranks, env.local_rank = rank, env.device = rank;
  env.master_addr = "127.0.0.1", env.master_port = port;
  return env;
}

// Like NCCL's unique id: 128 bytes, none of them alike in a row.
std::vector<uint8_t> id_blob() {
  std::vector<uint8_t> blob(128);
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = uint8_t(i * 7 + 3);
  return blob;
}

// One rank's share() on a thread of its own: what it got or the error it threw.
struct RankRun {
  std::vector<uint8_t> got;
  std::string error;
  std::thread thread;

  void start(const RankEnv& env, double timeout, std::vector<uint8_t> blob = {}) {
    thread = std::thread([this, env, timeout, blob] {
      try {
        Rendezvous rendezvous(env, timeout);
        got = rendezvous.share(blob);
      } catch (const Error& e) {
        error = e.what();
      }
    });
  }
  void join() { thread.join(); }
};

// What on_lost reported, and how often.
struct LostReports {
  std::mutex mutex;
  std::vector<std::pair<int, std::string>> calls;
  std::promise<void> first;

  std::function<void(int, const std::string&)> callback() {
    return [this](int rank, const std::string& why) {
      std::lock_guard<std::mutex> lock(mutex);
      calls.emplace_back(rank, why);
      if (calls.size() == 1) first.set_value();
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mutex);
    return calls.size();
  }
};

// A rank in a child process that joins, then exits without finish(): its sockets close as a
// crashed process's do. Forked before the test makes any socket or thread of its own.
pid_t rank_that_dies_after_joining(const RankEnv& env, std::vector<uint8_t> blob = {}) {
  const pid_t child = ::fork();
  if (child != 0) return child;
  try {
    auto* rendezvous = new Rendezvous(env, 10);  // never destroyed: no Goodbye
    rendezvous->share(blob);
    ::_exit(0);
  } catch (...) {
    ::_exit(2);
  }
}

int exit_status_of(pid_t child) {
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(Rendezvous, ThreeRanksGetRank0sBlob) {
  const int port = dist::free_tcp_port();
  RankRun runs[3];
  // The others first: they must wait for rank 0 to listen.
  runs[1].start(rank_env(1, 3, port), 10);
  runs[2].start(rank_env(2, 3, port), 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  runs[0].start(rank_env(0, 3, port), 10, id_blob());
  for (RankRun& r : runs) r.join();
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(runs[rank].error, "") << "rank " << rank;
    EXPECT_EQ(runs[rank].got, id_blob()) << "rank " << rank;
  }
}

TEST(Rendezvous, OneRankUsesNoSockets) {
  Rendezvous alone(rank_env(0, 1, 0), 1);
  EXPECT_EQ(alone.share(id_blob()), id_blob());
  alone.watch([](int, const std::string&) { ADD_FAILURE() << "nothing to lose alone"; });
  alone.finish();
}

TEST(Rendezvous, MissingRankTimesOutNamingIt) {
  const int port = dist::free_tcp_port();
  RankRun rank0, rank1;
  rank1.start(rank_env(1, 3, port), 10);  // waits longer than rank 0: it hears why rank 0 gave up
  const auto start = std::chrono::steady_clock::now();
  rank0.start(rank_env(0, 3, port), 0.5, id_blob());
  rank0.join();
  rank1.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5);
  for (const std::string& error : {rank0.error, rank1.error}) {
    EXPECT_TRUE(contains(error, "rank(s) 2 of 3 did not join")) << error;
    EXPECT_TRUE(contains(error, "port " + std::to_string(port))) << error;
  }
  EXPECT_TRUE(contains(rank1.error, "rank 1: rank 0 at 127.0.0.1:" + std::to_string(port) + " gave up"))
      << rank1.error;
}

TEST(Rendezvous, PeerWithoutRank0TimesOutNamingTheAddress) {
  const int port = dist::free_tcp_port();  // nobody listens there
  Rendezvous rank1(rank_env(1, 2, port), 0.3);
  expect_error([&] { rank1.share({}); },
               {"rank 1: could not reach rank 0 at 127.0.0.1:" + std::to_string(port), "check that rank 0 runs",
                "reachable"});
}

TEST(Rendezvous, MismatchedWorldSizeIsRefusedOnBothSides) {
  const int port = dist::free_tcp_port();
  RankRun rank0, rank1;
  rank0.start(rank_env(0, 2, port), 5, id_blob());
  rank1.start(rank_env(1, 3, port), 5);
  rank0.join();
  rank1.join();
  for (const std::string& error : {rank0.error, rank1.error}) {
    EXPECT_TRUE(contains(error, "rank 1 (at 127.0.0.1) was started with WORLD_SIZE=3 but rank 0 with WORLD_SIZE=2"))
        << error;
    EXPECT_TRUE(contains(error, "the same WORLD_SIZE")) << error;
  }
}

TEST(Rendezvous, RankClaimedTwiceIsRefused) {
  const int port = dist::free_tcp_port();
  RankRun rank0, first, second;
  rank0.start(rank_env(0, 3, port), 5, id_blob());
  first.start(rank_env(1, 3, port), 5);
  second.start(rank_env(1, 3, port), 5);
  rank0.join(), first.join(), second.join();
  for (const std::string& error : {rank0.error, first.error, second.error})
    EXPECT_TRUE(contains(error, "two processes claim rank 1: one at 127.0.0.1 and one at 127.0.0.1")) << error;
}

TEST(Rendezvous, PortInUseFailsAtOnce) {
  const int port = dist::free_tcp_port();
  Rendezvous holder(rank_env(0, 2, port), 1);
  expect_error([&] { Rendezvous second(rank_env(0, 2, port), 1); },
               {"rank 0 cannot listen on TCP port " + std::to_string(port), "choose another port"});
}

// A connection to 127.0.0.1:port, as a health check or port scanner makes one.
int connect_stranger(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET, addr.sin_port = htons(uint16_t(port)), addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

TEST(Rendezvous, StrangersOnThePortDoNotCount) {
  const int port = dist::free_tcp_port();
  Rendezvous rank0(rank_env(0, 2, port), 5);  // listening from here
  const int talker = connect_stranger(port);
  const char request[] = "GET / HTTP/1.0\r\n\r\n";
  EXPECT_GT(::send(talker, request, sizeof request, MSG_NOSIGNAL), 0);
  const int silent = connect_stranger(port);  // stays open, says nothing
  RankRun rank1;
  rank1.start(rank_env(1, 2, port), 5);
  EXPECT_EQ(rank0.share(id_blob()), id_blob());
  rank1.join();
  EXPECT_EQ(rank1.got, id_blob()) << rank1.error;
  ::close(talker);
  ::close(silent);
}

// One frame of the wire protocol (rendezvous.h), for a rank 0 played by hand.
std::vector<uint8_t> frame(uint8_t type, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> bytes{type};
  for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(uint8_t(payload.size() >> shift));
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return bytes;
}

TEST(Rendezvous, LossSentRightBehindTheBlobIsSeen) {
  // Rank 0 sends the blob and a Lost in one write: the peer takes both in during share(), and its
  // watch must look at what it holds before waiting for more.
  const int port = dist::free_tcp_port();
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int on = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET, addr.sin_port = htons(uint16_t(port)), addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);

  Rendezvous rank1(rank_env(1, 3, port), 5);
  std::vector<uint8_t> got;
  std::thread joining([&] { got = rank1.share({}); });
  const int fd = ::accept(listener, nullptr, nullptr);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> hello(5 + 16);
  for (size_t read = 0; read < hello.size();) {
    const ssize_t n = ::recv(fd, hello.data() + read, hello.size() - read, 0);
    ASSERT_GT(n, 0);
    read += size_t(n);
  }
  EXPECT_EQ(hello[0], 1);  // Hello
  const std::string why = "rank 2 ended unexpectedly (connection closed)";
  std::vector<uint8_t> lost{0, 0, 0, 2};
  lost.insert(lost.end(), why.begin(), why.end());
  std::vector<uint8_t> both = frame(2, id_blob());
  const std::vector<uint8_t> lost_frame = frame(4, lost);
  both.insert(both.end(), lost_frame.begin(), lost_frame.end());
  ASSERT_EQ(::send(fd, both.data(), both.size(), MSG_NOSIGNAL), ssize_t(both.size()));
  joining.join();
  EXPECT_EQ(got, id_blob());

  LostReports on1;
  rank1.watch(on1.callback());
  ASSERT_EQ(on1.first.get_future().wait_for(std::chrono::seconds(2)), std::future_status::ready);
  EXPECT_EQ(on1.calls[0].first, 2);
  EXPECT_EQ(on1.calls[0].second, why);
  rank1.finish();
  ::close(fd);
  ::close(listener);
}

TEST(Rendezvous, WatchNamesTheRankThatDiedOnEveryRank) {
  const int port = dist::free_tcp_port();
  const pid_t rank1 = rank_that_dies_after_joining(rank_env(1, 3, port));
  Rendezvous rank0(rank_env(0, 3, port), 10), rank2(rank_env(2, 3, port), 10);
  std::string rank2_error;
  std::thread joining([&] {
    try {
      rank2.share({});
    } catch (const Error& e) {
      rank2_error = e.what();
    }
  });
  EXPECT_EQ(rank0.share(id_blob()), id_blob());
  joining.join();
  ASSERT_EQ(rank2_error, "");

  LostReports on0, on2;
  rank0.watch(on0.callback());
  rank2.watch(on2.callback());
  for (LostReports* reports : {&on0, &on2}) {
    ASSERT_EQ(reports->first.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
    std::lock_guard<std::mutex> lock(reports->mutex);
    EXPECT_EQ(reports->calls[0].first, 1);  // rank 2 names rank 1, not rank 0 which told it
    const std::string& why = reports->calls[0].second;
    EXPECT_TRUE(contains(why, "rank 1 ended unexpectedly (connection")) << why;
  }
  EXPECT_EQ(exit_status_of(rank1), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  rank0.finish();
  rank2.finish();
  EXPECT_EQ(on0.count(), 1u);
  EXPECT_EQ(on2.count(), 1u);
}

TEST(Rendezvous, WatchNamesRank0WhenItDies) {
  const int port = dist::free_tcp_port();
  const pid_t rank0 = rank_that_dies_after_joining(rank_env(0, 2, port), id_blob());
  Rendezvous rank1(rank_env(1, 2, port), 10);
  EXPECT_EQ(rank1.share({}), id_blob());
  LostReports on1;
  rank1.watch(on1.callback());
  ASSERT_EQ(on1.first.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(on1.calls[0].first, 0);
  EXPECT_TRUE(contains(on1.calls[0].second, "rank 0 ended unexpectedly")) << on1.calls[0].second;
  EXPECT_EQ(exit_status_of(rank0), 0);
}

TEST(Rendezvous, FinishOnEveryRankReportsNoLoss) {
  const int port = dist::free_tcp_port();
  std::vector<std::unique_ptr<Rendezvous>> ranks;
  for (int rank = 0; rank < 3; ++rank) ranks.push_back(std::make_unique<Rendezvous>(rank_env(rank, 3, port), 10));
  std::vector<std::thread> joining;
  for (int rank = 1; rank < 3; ++rank) joining.emplace_back([&, rank] { ranks[size_t(rank)]->share({}); });
  ranks[0]->share(id_blob());
  for (std::thread& t : joining) t.join();

  LostReports reports[3];
  for (int rank = 0; rank < 3; ++rank) ranks[size_t(rank)]->watch(reports[rank].callback());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Every order of ending is planned: a peer before rank 0, rank 0, a peer after it.
  for (const int rank : {1, 0, 2}) {
    const auto start = std::chrono::steady_clock::now();
    ranks[size_t(rank)]->finish();
    ranks[size_t(rank)]->finish();  // idempotent
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (int rank = 0; rank < 3; ++rank) EXPECT_EQ(reports[rank].count(), 0u) << "rank " << rank;
}

TEST(Rendezvous, DestructorEndsAsPlanned) {
  const int port = dist::free_tcp_port();
  auto rank0 = std::make_unique<Rendezvous>(rank_env(0, 2, port), 10);
  Rendezvous rank1(rank_env(1, 2, port), 10);
  std::thread joining([&] { rank1.share({}); });
  rank0->share(id_blob());
  joining.join();
  LostReports on1;
  rank1.watch(on1.callback());
  rank0.reset();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(on1.count(), 0u);
}

}  // namespace
}  // namespace kiln

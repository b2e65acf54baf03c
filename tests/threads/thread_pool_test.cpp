// The process's thread pool (kiln/threads.h, core/parallel.h): every index runs exactly once at
// any thread count, the pieces a loop is cut into do not depend on the thread count, a task's
// exception reaches the caller, nested and concurrent loops finish, idle workers use no CPU, a
// thread count below 1 or over the cap is refused with the fix, and so is a thread the system
// refuses.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/parallel.h"
#include "kiln/error.h"
#include "kiln/threads.h"
#include "support/scoped_threads.h"

namespace kiln {
namespace {

using testing::ScopedThreads;

TEST(ThreadPool, EveryIndexRunsExactlyOnceAtAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    ScopedThreads scope(threads);
    ASSERT_EQ(kiln::threads(), threads);
    for (int64_t count : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(count));
      parallel_for(count, [&](int64_t i) { runs[size_t(i)].fetch_add(1); });
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(runs[size_t(i)].load(), 1) << "index " << i << " of " << count << " with " << threads << " threads";
    }
  }
}

// Loops back to back, as a training step runs them, hand their jobs over without the pool's lock
// while workers are awake; some pauses outlast the workers' check (50 us) so that they sleep and
// are woken. Every index of every loop runs exactly once, and no task runs after its loop returned
// (each loop's counters live only inside the loop's own round).
TEST(ThreadPool, BackToBackLoopsAndSleepsRunEveryIndexOnce) {
  for (int threads : {2, 4, 8}) {
    ScopedThreads scope(threads);
    for (int round = 0; round < 3000; ++round) {
      const int64_t count = 1 + round % 19;  // fewer and more tasks than threads
      std::vector<std::atomic<int>> runs(static_cast<size_t>(count));
      parallel_for(count, [&](int64_t i) { runs[size_t(i)].fetch_add(1); });
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(runs[size_t(i)].load(), 1) << "round " << round << ", index " << i << ", " << threads << " threads";
      if (round % 500 == 499) std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  }
}

TEST(ThreadPool, TasksRunOnSeveralThreads) {
  ScopedThreads scope(3);
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Each task waits a little so that one thread cannot take them all before the others wake.
  parallel_for(64, [&](int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GT(ids.size(), 1u);
}

// The (begin, end) pieces parallel_blocks hands out, sorted.
std::set<std::pair<int64_t, int64_t>> pieces(int64_t n, int64_t block) {
  std::mutex mu;
  std::set<std::pair<int64_t, int64_t>> out;
  parallel_blocks(n, block, [&](int64_t begin, int64_t end) {
    std::lock_guard lock(mu);
    out.emplace(begin, end);
  });
  return out;
}

TEST(ThreadPool, BlocksDependOnTheSizeOnlyAndCoverTheRange) {
  const std::vector<std::pair<int64_t, int64_t>> sizes = {{0, 4}, {1, 4}, {10, 3}, {12, 3}, {1000, 64}, {5, 100}};
  for (const auto& [n, block] : sizes) {
    std::set<std::pair<int64_t, int64_t>> one;
    {
      ScopedThreads scope(1);
      one = pieces(n, block);
    }
    for (int threads : {2, 3, 8}) {
      ScopedThreads scope(threads);
      EXPECT_EQ(pieces(n, block), one) << "n " << n << ", block " << block << ", " << threads << " threads";
    }
    // Consecutive blocks of `block` elements, the last one shorter.
    int64_t next = 0;
    for (const auto& [begin, end] : one) {
      EXPECT_EQ(begin, next);
      EXPECT_EQ(end, std::min(n, begin + block));
      next = end;
    }
    EXPECT_EQ(next, n);
    EXPECT_EQ(int64_t(one.size()), block_count(n, block));
  }
}

TEST(ThreadPool, ATasksExceptionReachesTheCallerAndThePoolStaysUsable) {
  for (int threads : {1, 3}) {
    ScopedThreads scope(threads);
    try {
      parallel_for(100, [](int64_t i) {
        if (i == 37) throw std::runtime_error("task 37 failed");
      });
      ADD_FAILURE() << "no exception with " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()), "task 37 failed");
    }
    std::atomic<int64_t> sum{0};
    parallel_for(100, [&](int64_t i) { sum += i; });
    EXPECT_EQ(sum.load(), 4950);
  }
}

TEST(ThreadPool, NestedLoopsRunAndFinish) {
  ScopedThreads scope(3);
  std::vector<std::atomic<int>> runs(64);
  parallel_for(8, [&](int64_t i) { parallel_for(8, [&](int64_t j) { runs[size_t(i * 8 + j)] += 1; }); });
  for (auto& r : runs) EXPECT_EQ(r.load(), 1);
}

TEST(ThreadPool, LoopsFromTwoThreadsAtOnceBothFinish) {
  ScopedThreads scope(2);
  std::vector<std::atomic<int64_t>> sums(2);
  auto work = [&](int who) {
    for (int round = 0; round < 200; ++round) parallel_for(50, [&](int64_t i) { sums[size_t(who)] += i; });
  };
  std::thread other(work, 1);
  work(0);
  other.join();
  EXPECT_EQ(sums[0].load(), 200 * 1225);
  EXPECT_EQ(sums[1].load(), 200 * 1225);
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Workers sleep once no loop has come for a short while (they check for the next one for 50 us
// first, thread_pool.cpp's kSpinFor): an idle pool costs no CPU time beyond that, 3 x 50 us here
// against the bound's 30 ms, so two processes on the same cores do not slow each other down while
// one waits. A pool that never went to sleep would use about 3 x 0.3 s.
TEST(ThreadPool, IdleWorkersUseNoCpu) {
  ScopedThreads scope(4);
  std::atomic<int64_t> sink{0};
  for (int round = 0; round < 20; ++round) parallel_for(16, [&](int64_t i) { sink += i; });
  const double before = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const double used = process_cpu_seconds() - before;
  EXPECT_LT(used, 0.03) << "the process used " << used << " s of CPU while its pool was idle for 0.3 s";
}

TEST(Threads, SetThreadsRefusesCountsBelowOne) {
  for (int bad : {0, -1}) {
    try {
      set_threads(bad);
      ADD_FAILURE() << "set_threads(" << bad << ") was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("at least 1"), std::string::npos) << message;
      EXPECT_NE(message.find(std::to_string(bad)), std::string::npos) << message;
    }
  }
  EXPECT_GE(kiln::threads(), 1);
}

TEST(Threads, SetThreadsInsideALoopIsAnError) {
  ScopedThreads scope(2);
  EXPECT_THROW(parallel_for(4, [](int64_t) { set_threads(1); }), Error);
  EXPECT_EQ(kiln::threads(), 2);
}

TEST(Threads, AvailableCoresIsAtLeastOne) {
  EXPECT_GE(available_cores(), 1);
  EXPECT_LE(available_cores(), int(std::max(1u, std::thread::hardware_concurrency())));
}

// One cap for set_threads, KILN_THREADS and --threads (kiln/threads.h): over it is an error that
// names the count, the cap and a count to use; the cap itself is accepted.
TEST(Threads, SetThreadsRefusesCountsOverTheCap) {
  const int cap = max_threads();
  EXPECT_GE(cap, 64);
  EXPECT_GE(cap, 4 * available_cores());
  const int before = kiln::threads();
  for (int bad : {cap + 1, 100000}) {
    try {
      set_threads(bad);
      ADD_FAILURE() << "set_threads(" << bad << ") was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("set_threads(" + std::to_string(bad) + ")"), std::string::npos) << message;
      EXPECT_NE(message.find("cap of " + std::to_string(cap)), std::string::npos) << message;
      EXPECT_NE(message.find("use e.g. " + std::to_string(available_cores())), std::string::npos) << message;
    }
  }
  EXPECT_EQ(kiln::threads(), before);  // a refused count leaves the pool as it was
  ScopedThreads scope(cap);
  EXPECT_EQ(kiln::threads(), cap);
}

// In the child of the death test below: leaves 32 MiB of address space (a thread's stack takes 8),
// asks for `n` threads and exits 0 with the error's message on stderr.
[[noreturn]] void start_threads_with_little_address_space(int n) {
  long kib = 0;
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmSize:", 0) == 0) kib = std::stol(line.substr(7));
  const rlim_t limit = rlim_t(kib) * 1024 + (rlim_t(32) << 20);
  const rlimit r{limit, limit};
  setrlimit(RLIMIT_AS, &r);
  try {
    set_threads(n);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::_Exit(0);
  }
  std::_Exit(1);
}

// A thread the system refuses (here: no address space left for the workers' stacks) is a
// kiln::Error naming the count and the fix, not std::system_error's abort. In a child process, so
// the limit stays there.
TEST(ThreadsDeathTest, ThreadTheSystemRefusesIsAnError) {
  const int n = max_threads();
  EXPECT_EXIT(start_threads_with_little_address_space(n), ::testing::ExitedWithCode(0),
              "could not start " + std::to_string(n) + " threads.*--threads");
}

}  // namespace
}  // namespace kiln

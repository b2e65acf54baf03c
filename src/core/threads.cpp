// The process's one thread pool (kiln/threads.h) and the parallel_for of the kernels
// (core/parallel.h).
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/parallel.h"
#include "kiln/error.h"
#include "kiln/threads.h"

namespace kiln {
namespace {

// Held while a loop runs on the pool, and while the pool is resized.
std::mutex& pool_mutex() {
  static std::mutex mu;
  return mu;
}

std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}

// The pool's size once it exists (0 before), readable without the mutex, which a loop holds
// while it runs (threads() may be asked from inside a task).
std::atomic<int> pool_size{0};

// Why max_threads() is what it is, for the messages of set_threads and KILN_THREADS.
std::string cap_reason() {
  return fmt::format("4 x the {} cores this process may use, at least 64: more threads than cores only take turns "
                     "on them",
                     available_cores());
}

// KILN_THREADS when set, else the cores available.
int default_threads() {
  const char* text = std::getenv("KILN_THREADS");
  if (text == nullptr || *text == '\0') return available_cores();
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (*end != '\0' || errno != 0 || v < 1 || v > max_threads())
    fail("KILN_THREADS='{}' is not valid: it takes how many threads the CPU kernels use, a whole number from 1 "
         "to {} ({}); use e.g. KILN_THREADS={}, or unset it to use the {} cores available",
         text, max_threads(), cap_reason(), available_cores(), available_cores());
  return int(v);
}

// The pool, made with the default size on first use. Call with pool_mutex() held.
ThreadPool& pool_locked() {
  std::unique_ptr<ThreadPool>& pool = pool_slot();
  if (!pool) {
    pool = std::make_unique<ThreadPool>(default_threads());
    pool_size = pool->threads();
  }
  return *pool;
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? int(hw) : 1;
}

int max_threads() { return std::max(64, 4 * available_cores()); }

int threads() {
  if (const int n = pool_size.load()) return n;
  std::lock_guard lock(pool_mutex());
  return pool_locked().threads();
}

void set_threads(int n) {
  if (n < 1)
    fail("set_threads({}): the thread count must be at least 1 (1 runs every kernel on the calling thread); use "
         "e.g. {}, the cores available to this process",
         n, available_cores());
  if (n > max_threads())
    fail("set_threads({}): the thread count is over the cap of {} ({}); use e.g. {}, the cores available to this "
         "process",
         n, max_threads(), cap_reason(), available_cores());
  if (ThreadPool::inside_task())
    fail("set_threads({}) was called from inside a parallel loop; call it between computations", n);
  std::lock_guard lock(pool_mutex());
  std::unique_ptr<ThreadPool>& pool = pool_slot();
  if (pool && pool->threads() == n) return;
  pool.reset();  // joins the old workers before the new ones start
  pool_size = 0;
  pool = std::make_unique<ThreadPool>(n);
  pool_size = n;
}

void parallel_for(int64_t count, TaskRef task) {
  if (count <= 0) return;
  if (count > 1 && !ThreadPool::inside_task()) {
    std::unique_lock lock(pool_mutex(), std::try_to_lock);
    if (lock.owns_lock()) {
      ThreadPool& pool = pool_locked();
      if (pool.threads() > 1) return pool.run(count, task);
    }
  }
  for (int64_t i = 0; i < count; ++i) task(i);
}

}  // namespace kiln

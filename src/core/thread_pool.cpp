#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "kiln/error.h"
#include "kiln/threads.h"

namespace kiln {
namespace {
thread_local bool t_inside_task = false;

// Marks the current thread as running tasks for as long as it lives.
struct InsideTask {
  bool was = t_inside_task;
  InsideTask() { t_inside_task = true; }
  ~InsideTask() { t_inside_task = was; }
};
}  // namespace

bool ThreadPool::inside_task() { return t_inside_task; }

// When the system refuses a thread (std::thread throws std::system_error: a limit on threads per
// user or container, or no memory for its stack), the workers already started are joined (a
// joinable std::thread destroyed unjoined would terminate the process) and a kiln::Error says so.
ThreadPool::ThreadPool(int threads) {
  try {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::system_error& e) {
    const size_t started = workers_.size();
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    fail("could not start {} threads for the CPU kernels: the system refused thread {} ({}), a limit on threads "
         "(ulimit -u, a container's pids limit) or on memory for their stacks; use fewer, e.g. --threads {} or "
         "KILN_THREADS={} (the cores this process may use)",
         threads, started + 2, e.what(), available_cores(), available_cores());
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

// Takes indices until none is left. After a failure the remaining indices are skipped (next is
// pushed past the end), so the caller hears of it without waiting for the whole loop.
void ThreadPool::work_on(Job& job) {
  for (;;) {
    const int64_t i = job.next.fetch_add(1, std::memory_order_relaxed);
    if (i >= job.count) return;
    try {
      job.task(i);
    } catch (...) {
      std::lock_guard lock(job.error_mu);
      if (!job.error) job.error = std::current_exception();
      job.next.store(job.count, std::memory_order_relaxed);
    }
  }
}

namespace {
// How long a worker that finished a loop, or the caller waiting for the workers, keeps checking
// before it sleeps. A small network's step on 16 threads runs a loop every few tens of
// microseconds; a futex wake per worker (each then taking the pool's mutex in turn) cost more than
// many of its loops' work. An idle pool spends this once, per worker, then sleeps.
constexpr auto kSpinFor = std::chrono::microseconds(50);

// Calls done() until it is true or kSpinFor has passed; true if it became true. Between checks the
// core is offered to other runnable threads every so often (a pool on shared cores then takes
// little from them while it checks).
template <class Done>
bool spin_until(Done done) {
  const auto until = std::chrono::steady_clock::now() + kSpinFor;
  for (int i = 1;; ++i) {
    if (done()) return true;
    if (i % 64 == 0) {
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::yield();
    } else {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }
}
}  // namespace

uint64_t ThreadPool::wait_for_job(uint64_t seen) {
  auto posted = [&] { return stop_.load() || generation_.load() != seen; };
  if (!spin_until(posted)) {
    std::unique_lock lock(mu_);
    sleepers_.fetch_add(1);  // before the check: a caller that bumps generation_ after it sees us
    wake_.wait(lock, posted);
    sleepers_.fetch_sub(1);
  }
  return generation_.load();
}

void ThreadPool::worker_loop() {
  InsideTask inside;
  uint64_t seen = 0;
  for (;;) {
    seen = wait_for_job(seen);
    if (stop_.load()) return;
    busy_.fetch_add(1);  // counted before job_ is read: the caller keeps the job alive until busy_ is 0
    if (Job* job = job_.load()) work_on(*job);
    if (busy_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      { std::lock_guard lock(mu_); }  // the caller is either before its check or asleep
      idle_.notify_one();
    }
  }
}

void ThreadPool::wait_until_workers_left() {
  auto left = [&] { return busy_.load() == 0; };
  if (spin_until(left)) return;
  caller_sleeping_.store(true);
  {
    std::unique_lock lock(mu_);
    idle_.wait(lock, left);
  }
  caller_sleeping_.store(false);
}

void ThreadPool::run(int64_t count, TaskRef task) {
  if (count <= 0) return;
  Job job(task, count);
  const int helpers = int(std::min<int64_t>(int64_t(workers_.size()), count - 1));
  if (helpers > 0) {
    job_.store(&job);
    generation_.fetch_add(1);
    if (sleepers_.load() > 0) {
      { std::lock_guard lock(mu_); }  // a worker between its check and its sleep finishes going to sleep
      // Wake only as many workers as there are tasks beyond the caller's first.
      if (helpers == int(workers_.size()))
        wake_.notify_all();
      else
        for (int i = 0; i < helpers; ++i) wake_.notify_one();
    }
  }
  {
    InsideTask inside;
    work_on(job);
  }
  if (helpers > 0) {
    job_.store(nullptr);  // a worker joining from now on finds nothing to run
    wait_until_workers_left();
  }
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace kiln

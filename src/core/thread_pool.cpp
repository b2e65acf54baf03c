#include "core/thread_pool.h"

#include <algorithm>
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

void ThreadPool::worker_loop() {
  InsideTask inside;
  uint64_t seen = 0;
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || (job_ != nullptr && generation_ != seen); });
    if (stop_) return;
    seen = generation_;
    Job& job = *job_;
    ++busy_;  // the caller keeps the job alive until busy_ is back to 0
    lock.unlock();
    work_on(job);
    lock.lock();
    if (--busy_ == 0) idle_.notify_one();
  }
}

void ThreadPool::run(int64_t count, TaskRef task) {
  if (count <= 0) return;
  Job job(task, count);
  const int helpers = int(std::min<int64_t>(int64_t(workers_.size()), count - 1));
  if (helpers > 0) {
    {
      std::lock_guard lock(mu_);
      job_ = &job;
      ++generation_;
    }
    // Wake only as many workers as there are tasks beyond the caller's first.
    if (helpers == int(workers_.size()))
      wake_.notify_all();
    else
      for (int i = 0; i < helpers; ++i) wake_.notify_one();
  }
  {
    InsideTask inside;
    work_on(job);
  }
  if (helpers > 0) {
    std::unique_lock lock(mu_);
    job_ = nullptr;  // a worker waking from now on finds nothing to join
    idle_.wait(lock, [&] { return busy_ == 0; });
  }
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace kiln

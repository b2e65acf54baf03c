#pragma once
// A pool of worker threads that runs numbered tasks. The caller works too. After a loop a worker
// keeps checking for the next one for a short while (kSpinFor in thread_pool.cpp), yielding its
// core to any other runnable thread as it does, then sleeps on a condition variable: in a training
// step loops follow each other within microseconds, and waking sleeping workers costs more than
// that, while an idle pool costs nothing.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kiln {

// A non-owning reference to a callable taking a task index (no allocation, unlike
// std::function); valid while the callable it was made from lives.
class TaskRef {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::remove_cv_t<F>, TaskRef>>>
  TaskRef(F& f)
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, int64_t i) { (*static_cast<F*>(o))(i); }) {}
  void operator()(int64_t i) const { call_(object_, i); }

 private:
  void* object_;
  void (*call_)(void*, int64_t);
};

class ThreadPool {
 public:
  // `threads` >= 1 counts the caller of run(): threads - 1 workers are started.
  explicit ThreadPool(int threads);
  ~ThreadPool();  // wakes and joins the workers
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return int(workers_.size()) + 1; }

  // Runs task(i) once for every i in [0, count), on the calling thread and the workers, and
  // returns when all have finished. Which thread runs a task is not fixed (an idle thread takes
  // the next index), so tasks must write disjoint outputs. The first exception a task throws is
  // rethrown here once the tasks already started have finished; tasks not yet started are
  // skipped. One run at a time: callers serialize (parallel.h does).
  void run(int64_t count, TaskRef task);

  // True on a pool worker, and on a caller of run() while it runs: a loop nested in a task must
  // run serially (the workers are busy with the outer loop).
  static bool inside_task();

 private:
  struct Job {
    Job(TaskRef t, int64_t n) : task(t), count(n) {}
    TaskRef task;
    int64_t count;
    std::atomic<int64_t> next{0};
    std::mutex error_mu;
    std::exception_ptr error;
  };
  static void work_on(Job& job);
  void worker_loop();
  // The generation of the next job posted after `seen` (or any, once stop_ is set): checked for
  // kSpinFor, then waited for asleep.
  uint64_t wait_for_job(uint64_t seen);
  void wait_until_workers_left();

  // The job's hand-over needs no lock while everyone is awake: the caller publishes job_, then
  // bumps generation_; a worker counts itself into busy_ before it reads job_, and the caller
  // clears job_ before it waits for busy_ to reach 0 (all sequentially consistent, so a worker
  // either is counted or finds job_ cleared). The mutex guards only the sleeps.
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;           // sleeping workers: a job was posted, or stop
  std::condition_variable idle_;           // the sleeping caller: the last worker left the job
  std::atomic<Job*> job_{nullptr};         // the job being run, null between runs
  std::atomic<uint64_t> generation_{0};    // counts posted jobs, so a worker joins each at most once
  std::atomic<int> busy_{0};               // workers inside job_
  std::atomic<int> sleepers_{0};           // workers asleep on wake_ (none: no notify needed)
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
};

}  // namespace kiln

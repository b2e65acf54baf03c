#pragma once
// A pool of worker threads that runs numbered tasks. The caller works too; workers sleep on a
// condition variable when there is nothing to do, never spinning, so a pool on a machine shared
// with other processes costs nothing while it waits.
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

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;  // workers: a job was posted, or stop
  std::condition_variable idle_;  // the caller: the last worker left the job
  Job* job_ = nullptr;            // the job being run, null between runs
  uint64_t generation_ = 0;       // counts posted jobs, so a worker joins each at most once
  int busy_ = 0;                  // workers inside job_
  bool stop_ = false;
};

}  // namespace kiln

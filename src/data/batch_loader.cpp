// Worker threads claim batch numbers in order and may run at most `prefetch` batches ahead
// of the consumer; finished batches wait in slot (number % prefetch) until next() takes them.
// Which worker builds a batch never matters: its content depends only on (seed, epoch, batch).
#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "data/transforms.h"
#include "kiln/data.h"
#include "kiln/error.h"

namespace kiln {

struct BatchLoader::Impl {
  const Dataset& data;
  int64_t batch;
  bool shuffle, drop_last;
  Augment augment;
  PixelAffine affine;
  uint64_t seed;
  int workers, prefetch;

  // State of the current epoch. Guarded by mu except where noted.
  int epoch = 0;
  bool started = false;
  std::vector<int64_t> order;  // sample index for each position; written before workers start
  int64_t next_to_build = 0, delivered = 0;
  struct Slot {
    bool ready = false;
    Batch batch;
    std::exception_ptr error;
  };
  std::vector<Slot> slots;
  bool stop = false;
  std::mutex mu;
  std::condition_variable work_cv, ready_cv;
  std::vector<std::thread> threads;

  Impl(const Dataset& d) : data(d) {}

  int64_t batches() const {
    if (data.count == 0) return 0;
    return drop_last ? data.count / batch : (data.count + batch - 1) / batch;
  }

  // Content of batch number b of the current epoch (safe to call from any thread).
  void build(int64_t b, Batch& out) const {
    const int64_t sample_floats = data.image_size();
    out.images.assign(batch * sample_floats, 0.0f);
    out.labels.assign(batch, 0);
    const int64_t first = b * batch;
    out.size = std::min(batch, data.count - first);
    for (int64_t i = 0; i < out.size; ++i) {
      int64_t index = order.empty() ? first + i : order[first + i];
      build_sample(data, index, augment, seed, epoch, affine, out.images.data() + i * sample_floats);
      out.labels[i] = data.labels[index];
    }
  }

  void worker_loop() {
    std::unique_lock lock(mu);
    const int64_t total = batches();
    while (true) {
      work_cv.wait(lock, [&] { return stop || next_to_build >= total || next_to_build < delivered + prefetch; });
      if (stop || next_to_build >= total) return;
      int64_t b = next_to_build++;
      lock.unlock();
      Batch built;
      std::exception_ptr error;
      try {
        build(b, built);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      Slot& slot = slots[b % prefetch];
      slot.batch = std::move(built);
      slot.error = error;
      slot.ready = true;
      ready_cv.notify_all();
    }
  }

  void stop_workers() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    work_cv.notify_all();
    for (std::thread& t : threads) t.join();
    threads.clear();
    stop = false;
  }
};

BatchLoader::BatchLoader(const Dataset& dataset, int batch, bool shuffle, bool drop_last,
                         Augment augment, std::vector<float> mean, std::vector<float> std,
                         uint64_t seed, int workers, int prefetch)
    : impl_(std::make_unique<Impl>(dataset)) {
  if (batch <= 0) fail("batch loader: batch size must be positive, got {}", batch);
  if (workers < 0) fail("batch loader: workers must be >= 0, got {}", workers);
  if (prefetch <= 0) fail("batch loader: prefetch must be >= 1, got {}", prefetch);
  if (augment.pad_crop < 0) fail("batch loader: pad_crop must be >= 0, got {}", augment.pad_crop);
  if (dataset.count < 0 || int64_t(dataset.images.size()) != dataset.count * dataset.image_size() ||
      int64_t(dataset.labels.size()) != dataset.count)
    fail("batch loader: dataset is inconsistent: count {} with {} image bytes ({}x{}x{} each) and {} labels",
         dataset.count, dataset.images.size(), dataset.height, dataset.width, dataset.channels,
         dataset.labels.size());
  Impl& s = *impl_;
  s.batch = batch;
  s.shuffle = shuffle;
  s.drop_last = drop_last;
  s.augment = augment;
  s.affine = make_pixel_affine(mean, std, dataset.channels);
  s.seed = seed;
  s.workers = workers;
  s.prefetch = prefetch;
}

BatchLoader::~BatchLoader() { impl_->stop_workers(); }

int64_t BatchLoader::batches_per_epoch() const { return impl_->batches(); }

void BatchLoader::start_epoch(int epoch) {
  Impl& s = *impl_;
  s.stop_workers();
  s.epoch = epoch;
  s.started = true;
  if (s.shuffle) s.order = epoch_permutation(s.data.count, s.seed, epoch);
  s.next_to_build = 0;
  s.delivered = 0;
  s.slots.assign(s.prefetch, Impl::Slot{});
  const int64_t total = s.batches();
  int threads = int(std::min<int64_t>(s.workers, total));
  for (int i = 0; i < threads; ++i) s.threads.emplace_back([&s] { s.worker_loop(); });
}

bool BatchLoader::next(Batch& out) {
  Impl& s = *impl_;
  if (!s.started) fail("batch loader: call start_epoch(epoch) before next()");
  if (s.delivered >= s.batches()) return false;
  if (s.workers == 0) {  // synchronous mode
    s.build(s.delivered++, out);
    return true;
  }
  std::unique_lock lock(s.mu);
  Impl::Slot& slot = s.slots[s.delivered % s.prefetch];
  s.ready_cv.wait(lock, [&] { return slot.ready; });
  slot.ready = false;
  std::exception_ptr error = std::exchange(slot.error, nullptr);
  std::swap(out, slot.batch);
  ++s.delivered;
  lock.unlock();
  s.work_cv.notify_all();
  if (error) std::rethrow_exception(error);
  return true;
}

}  // namespace kiln

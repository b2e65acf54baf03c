// Worker threads claim pieces of batches (kChunk samples each) in order and may run at most
// `prefetch` batches ahead of the consumer; a batch waits in slot (number % prefetch), filled by
// whichever workers took its pieces, until next() takes it. Pieces rather than whole batches, so
// that all workers help even when few batches are in flight (a batch of 256 photos is ~16 ms of
// decoding per worker-core; four whole batches in flight would keep only four workers busy).
// Which worker builds a piece never matters: a sample depends only on (seed, epoch, index).
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

namespace {
constexpr int64_t kChunk = 8;  // samples per piece of work
}  // namespace

struct BatchLoader::Impl {
  const SampleSource& source;
  std::unique_ptr<SampleSource> owned;  // the DatasetSource of the Dataset constructor
  int64_t batch;
  bool shuffle, drop_last;
  PixelAffine affine;
  uint64_t seed;
  int workers, prefetch;
  LoaderShard shard;
  bool pixels = false, pixels_next = false;  // deliver uint8 pixels (this epoch, from the next one)

  // State of the current epoch. Guarded by mu except where noted.
  int epoch = 0;
  bool started = false;
  std::vector<int64_t> order;  // sample index for each position; written before workers start
  int64_t next_piece = 0, delivered = 0;  // pieces: batch * pieces_per_batch() + piece
  struct Slot {
    int64_t number = -1;  // the batch being built here
    int64_t pieces_left = 0;
    bool ready = false;
    Batch batch;  // its buffers are reused: next() swaps in the consumer's previous batch
    std::exception_ptr error;
  };
  std::vector<Slot> slots;
  bool stop = false;
  std::mutex mu;
  std::condition_variable work_cv, ready_cv;
  std::vector<std::thread> threads;

  Impl(const SampleSource& s, std::unique_ptr<SampleSource> own = nullptr) : source(s), owned(std::move(own)) {}

  // Batches of the whole epoch, before the shard's split.
  int64_t global_batches() const {
    const int64_t n = source.count();
    if (n == 0) return 0;
    return drop_last ? n / batch : (n + batch - 1) / batch;
  }
  // This shard's batches: every rank gets the same count, so ranks step together (the last
  // global batches that would leave some rank without one are dropped).
  int64_t batches() const {
    const int64_t all = global_batches();
    return shard.world == 1 ? all : all / shard.world;
  }

  int64_t pieces_per_batch() const { return (batch + kChunk - 1) / kChunk; }

  // Sizes `out` for this shard's batch number b of the current epoch (zero padding rows past the
  // last sample of a partial batch are written by the pieces).
  void start_batch(int64_t b, Batch& out) const {
    if (pixels) {
      out.pixels.resize(batch * source.shape().size());
      out.images.clear();
    } else {
      out.images.resize(batch * source.shape().size());
      out.pixels.clear();
    }
    out.labels.resize(batch);
    out.size = std::min(batch, source.count() - (b * shard.world + shard.rank) * batch);
  }

  // Samples [piece * kChunk, +kChunk) of this shard's batch number b (safe to call from any thread
  // on disjoint pieces).
  void build_piece(int64_t b, int64_t piece, Batch& out) const {
    const int64_t sample_values = source.shape().size();
    const int64_t first = (b * shard.world + shard.rank) * batch;
    std::vector<uint8_t> scratch(pixels ? 0 : sample_values);
    for (int64_t i = piece * kChunk; i < std::min(batch, (piece + 1) * kChunk); ++i) {
      uint8_t* raw = pixels ? out.pixels.data() + i * sample_values : scratch.data();
      if (i >= out.size) {  // padding of a last partial batch
        if (pixels) std::fill(raw, raw + sample_values, uint8_t(0));
        else std::fill(out.images.data() + i * sample_values, out.images.data() + (i + 1) * sample_values, 0.0f);
        out.labels[i] = 0;
        continue;
      }
      const int64_t index = order.empty() ? first + i : order[first + i];
      out.labels[i] = source.write_sample(index, seed, epoch, raw);
      if (!pixels) normalize_pixels(raw, sample_values, affine, out.images.data() + i * sample_values);
    }
  }

  void build(int64_t b, Batch& out) const {
    start_batch(b, out);
    for (int64_t piece = 0; piece < pieces_per_batch(); ++piece) build_piece(b, piece, out);
  }

  void worker_loop() {
    std::unique_lock lock(mu);
    const int64_t per_batch = pieces_per_batch();
    const int64_t total = batches() * per_batch;
    while (true) {
      work_cv.wait(lock, [&] {
        return stop || next_piece >= total || next_piece / per_batch < delivered + prefetch;
      });
      if (stop || next_piece >= total) return;
      const int64_t unit = next_piece++;
      const int64_t b = unit / per_batch, piece = unit % per_batch;
      Slot& slot = slots[b % prefetch];
      if (slot.number != b) {  // the batch's first piece: the slot was delivered and is free
        slot.number = b;
        slot.pieces_left = per_batch;
        slot.ready = false;
        slot.error = nullptr;
        start_batch(b, slot.batch);
      }
      lock.unlock();
      std::exception_ptr error;
      try {
        build_piece(b, piece, slot.batch);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && !slot.error) slot.error = error;
      if (--slot.pieces_left == 0) {
        slot.ready = true;
        ready_cv.notify_all();
      }
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

  void configure(int batch_, bool shuffle_, bool drop_last_, const std::vector<float>& mean,
                 const std::vector<float>& std, uint64_t seed_, int workers_, int prefetch_, LoaderShard shard_) {
    if (batch_ <= 0) fail("batch loader: batch size must be positive, got {}", batch_);
    if (workers_ < 0) fail("batch loader: workers must be >= 0, got {}", workers_);
    if (prefetch_ <= 0) fail("batch loader: prefetch must be >= 1, got {}", prefetch_);
    if (shard_.world < 1 || shard_.rank < 0 || shard_.rank >= shard_.world)
      fail("batch loader: rank {} of world size {} is not a shard; the rank must be in [0, world size)", shard_.rank,
           shard_.world);
    batch = batch_;
    shuffle = shuffle_;
    drop_last = drop_last_;
    affine = make_pixel_affine(mean, std, source.shape().channels);
    seed = seed_;
    workers = workers_;
    prefetch = prefetch_;
    shard = shard_;
  }
};

BatchLoader::BatchLoader(const SampleSource& source, int batch, bool shuffle, bool drop_last,
                         std::vector<float> mean, std::vector<float> std, uint64_t seed, int workers, int prefetch,
                         LoaderShard shard)
    : impl_(std::make_unique<Impl>(source)) {
  impl_->configure(batch, shuffle, drop_last, mean, std, seed, workers, prefetch, shard);
}

BatchLoader::BatchLoader(const Dataset& dataset, int batch, bool shuffle, bool drop_last, Augment augment,
                         std::vector<float> mean, std::vector<float> std, uint64_t seed, int workers, int prefetch) {
  auto source = std::make_unique<DatasetSource>(dataset, augment);
  const SampleSource& ref = *source;
  impl_ = std::make_unique<Impl>(ref, std::move(source));
  impl_->configure(batch, shuffle, drop_last, mean, std, seed, workers, prefetch, {});
}

BatchLoader::~BatchLoader() { impl_->stop_workers(); }

int64_t BatchLoader::batches_per_epoch() const { return impl_->batches(); }

void BatchLoader::deliver_pixels(bool on) { impl_->pixels_next = on; }

const std::vector<float>& BatchLoader::normalization_scale() const { return impl_->affine.scale; }

const std::vector<float>& BatchLoader::normalization_bias() const { return impl_->affine.bias; }

void BatchLoader::start_epoch(int epoch) {
  Impl& s = *impl_;
  s.stop_workers();
  s.pixels = s.pixels_next;
  s.epoch = epoch;
  s.started = true;
  if (s.shuffle) s.order = epoch_permutation(s.source.count(), s.seed, epoch);
  s.next_piece = 0;
  s.delivered = 0;
  if (int64_t(s.slots.size()) != s.prefetch) s.slots.resize(s.prefetch);
  for (Impl::Slot& slot : s.slots) slot.number = -1, slot.ready = false, slot.error = nullptr;
  const int64_t total = s.batches() * s.pieces_per_batch();
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
  s.ready_cv.wait(lock, [&] { return slot.ready && slot.number == s.delivered; });
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

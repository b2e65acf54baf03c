// Work sharing: each batch of `batch` positions is built in a slot of a ring (`prefetch` slots).
// The GPU feeder threads claim runs of kGpuRun positions from the front of the oldest batch with
// unclaimed positions (among the next gpu_lead), the CPU workers runs of kCpuRun from its back; a position the GPU cannot
// decode is handed to the CPU workers. GPU samples land in the slot's device buffer, CPU samples
// in its pinned host buffer; next() copies the CPU samples up and hands the device buffer out.
// A slot is rebuilt only after the consumer has asked for a later batch (so it has queued its
// reads of this one: DevicePixels::read_on), and its device writes wait for those reads.
#include "data/gpu_decode/gpu_decode_loader.h"

#include <cuda_runtime.h>
#include <nvjpeg.h>

#include <algorithm>
#include <cstdint>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "data/gpu_decode/crop_resize_cuda.h"
#include "kiln/error.h"

namespace kiln {
namespace {

constexpr int kGpuRun = 32;      // positions per GPU claim: one nvjpegDecodeBatched call
constexpr int kCpuRun = 8;       // positions per CPU claim
constexpr int kGpuFeeders = 2;   // so one reads and parses files while the other's batch decodes


void check_cuda(cudaError_t status, const char* call) {
  if (status != cudaSuccess)
    fail("GPU decode: CUDA call {} failed: {} ({}); use --decode cpu", call, cudaGetErrorString(status), int(status));
}
#define KILN_GD_CUDA(call) check_cuda((call), #call)

const char* nvjpeg_status_name(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
    case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
    case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
    case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
    case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
    default: return "error";
  }
}

void check_nvjpeg(nvjpegStatus_t status, const char* call) {
  if (status != NVJPEG_STATUS_SUCCESS)
    fail("GPU decode: nvJPEG call {} failed: {} ({}); use --decode cpu", call, nvjpeg_status_name(status),
         int(status));
}
#define KILN_NVJPEG(call) check_nvjpeg((call), #call)

// One slot's device buffer as the consumer sees it.
class SlotPixels final : public DevicePixels {
 public:
  uint8_t* device = nullptr;
  cudaEvent_t ready = nullptr, consumed = nullptr;
  const uint8_t* data() const override { return device; }
  void* ready_event() const override { return ready; }
  void read_on(void* stream) override {
    if (stream) KILN_GD_CUDA(cudaEventRecord(consumed, static_cast<cudaStream_t>(stream)));
  }
  void wait_ready() override { KILN_GD_CUDA(cudaEventSynchronize(ready)); }
};

struct Slot {
  int64_t number = -1;  // the batch built here
  int64_t size = 0;     // real samples (the rest is padding)
  int64_t front = 0, back = 0, done = 0;
  bool ready = false;
  std::vector<int64_t> handoff;  // positions the GPU passed to the CPU workers
  std::vector<uint8_t> on_host;  // per position: its pixels are in `host`
  std::vector<int32_t> labels;
  uint8_t* host = nullptr;       // pinned, batch * sample bytes
  cudaEvent_t copied = nullptr;  // the last upload from `host` has finished
  std::shared_ptr<SlotPixels> pixels = std::make_shared<SlotPixels>();
  std::exception_ptr error;
};

// What one GPU feeder thread owns.
struct Feeder {
  nvjpegJpegState_t state = nullptr;
  nvjpegJpegStream_t parser = nullptr;
  cudaStream_t stream = nullptr;
  uint8_t* arena = nullptr;  // decoded images of one run
  size_t arena_bytes = 0;
  CropJob* jobs_host = nullptr;  // pinned
  CropJob* jobs_device = nullptr;
};

class GpuDecodeLoader final : public BatchStream {
 public:
  GpuDecodeLoader(const SampleSource& source, const GpuDecodeSettings& s) : source_(source), s_(s) {
    if (s_.batch <= 0) fail("GPU decode loader: batch size must be positive, got {}", s_.batch);
    if (s_.prefetch < 2) s_.prefetch = 2;
    if (s_.gpu_lead < 1) fail("GPU decode loader: gpu_lead must be >= 1, got {}", s_.gpu_lead);
    const SampleShape shape = source.shape();
    if (shape.channels != 3 || shape.height != shape.width)
      fail("GPU decode: samples must be square RGB ({}x{}x{} asked for); use --decode cpu", shape.height, shape.width,
           shape.channels);
    side_ = int(shape.width);
    sample_bytes_ = shape.size();
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices <= s_.device)
      fail("GPU decode: no CUDA device {} answers; use --decode cpu", s_.device);
    KILN_GD_CUDA(cudaSetDevice(s_.device));
    // The hardware engines where this GPU and driver have them; else the GPU-assisted decoder.
    if (nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &handle_) ==
        NVJPEG_STATUS_SUCCESS) {
      hardware_ = true;
    } else {
      KILN_NVJPEG(nvjpegCreateEx(NVJPEG_BACKEND_GPU_HYBRID, nullptr, nullptr, NVJPEG_FLAGS_DEFAULT, &handle_));
    }
    KILN_GD_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    slots_.resize(size_t(s_.prefetch));
    for (Slot& slot : slots_) {
      KILN_GD_CUDA(cudaMallocHost(&slot.host, size_t(s_.batch * sample_bytes_)));
      KILN_GD_CUDA(cudaMalloc(&slot.pixels->device, size_t(s_.batch * sample_bytes_)));
      KILN_GD_CUDA(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
      KILN_GD_CUDA(cudaEventCreateWithFlags(&slot.pixels->ready, cudaEventDisableTiming));
      KILN_GD_CUDA(cudaEventCreateWithFlags(&slot.pixels->consumed, cudaEventDisableTiming));
    }
    // The decode streams run at the highest priority: their small kernels then start as soon as
    // SMs free up rather than behind the whole queued training step, so a batch's GPU share is not
    // late by a step's worth of kernels.
    int lowest = 0, highest = 0;
    KILN_GD_CUDA(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
    feeders_.resize(kGpuFeeders);
    for (Feeder& f : feeders_) {
      KILN_NVJPEG(nvjpegJpegStateCreate(handle_, &f.state));
      KILN_NVJPEG(nvjpegJpegStreamCreate(handle_, &f.parser));
      KILN_GD_CUDA(cudaStreamCreateWithPriority(&f.stream, cudaStreamNonBlocking, highest));
      KILN_GD_CUDA(cudaMallocHost(&f.jobs_host, sizeof(CropJob) * kGpuRun));
      KILN_GD_CUDA(cudaMalloc(&f.jobs_device, sizeof(CropJob) * kGpuRun));
    }
  }

  ~GpuDecodeLoader() override {
    stop_threads();
    // Teardown: nothing here can fail usefully; the statuses are dropped.
    cudaDeviceSynchronize();
    for (Feeder& f : feeders_) {
      cudaFree(f.arena), cudaFree(f.jobs_device), cudaFreeHost(f.jobs_host), cudaStreamDestroy(f.stream);
      nvjpegJpegStreamDestroy(f.parser), nvjpegJpegStateDestroy(f.state);
    }
    for (Slot& slot : slots_) {
      cudaFreeHost(slot.host), cudaFree(slot.pixels->device), cudaEventDestroy(slot.copied);
      cudaEventDestroy(slot.pixels->ready), cudaEventDestroy(slot.pixels->consumed);
    }
    cudaStreamDestroy(copy_stream_);
    nvjpegDestroy(handle_);
  }

  int64_t batches_per_epoch() const override {
    const int64_t n = source_.count();
    const int64_t all = n == 0 ? 0 : s_.drop_last ? n / s_.batch : (n + s_.batch - 1) / s_.batch;
    return s_.shard.world == 1 ? all : all / s_.shard.world;
  }

  void start_epoch(int epoch) override {
    stop_threads();
    epoch_ = epoch;
    started_ = true;
    order_ = s_.shuffle ? epoch_permutation(source_.count(), s_.seed, epoch) : std::vector<int64_t>{};
    delivered_ = released_ = opened_ = 0;
    for (Slot& slot : slots_) slot.number = -1, slot.ready = false, slot.error = nullptr;
    for (int i = 0; i < kGpuFeeders; ++i) threads_.emplace_back([this, i] { run_feeder(feeders_[size_t(i)]); });
    for (int i = 0; i < s_.workers; ++i) threads_.emplace_back([this] { run_worker(); });
  }

  bool next(Batch& out) override {
    if (!started_) fail("GPU decode loader: call start_epoch(epoch) before next()");
    if (delivered_ >= 2 && delivered_ < batches_per_epoch()) {
      // Pace the consumer to the GPU, as the CPU path's staging buffers do: no more than two batches
      // ahead of the reads. Ahead of that, every next() would look urgent to the GPU feeders.
      const auto start = std::chrono::steady_clock::now();
      KILN_GD_CUDA(cudaEventSynchronize(slots_[size_t((delivered_ - 2) % s_.prefetch)].pixels->consumed));
      paced_ = paced_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    std::unique_lock lock(mu_);
    if (delivered_ >= batches_per_epoch()) return false;
    released_ = delivered_;  // the consumer has queued its reads of every batch before this one
    work_cv_.notify_all();
    Slot& slot = slots_[size_t(delivered_ % s_.prefetch)];
    ready_cv_.wait(lock, [&] { return slot.ready && slot.number == delivered_; });
    std::exception_ptr error = std::exchange(slot.error, nullptr);
    ++delivered_;
    lock.unlock();
    if (error) std::rethrow_exception(error);
    upload_host_samples(slot);
    out.images.clear();
    out.pixels.clear();
    out.device = slot.pixels;
    out.labels = slot.labels;
    out.size = slot.size;
    return true;
  }

  double paced_seconds() const override { return paced_; }

  std::string describe() const override {
    const int64_t gpu = gpu_samples_, cpu = cpu_samples_;
    return fmt::format("nvJPEG {} backend: {} samples decoded on the GPU, {} on the CPU",
                       hardware_ ? "hardware" : "GPU-hybrid", gpu, cpu);
  }

 private:
  int64_t first_position(int64_t b) const { return (b * s_.shard.world + s_.shard.rank) * s_.batch; }
  int64_t index_at(int64_t b, int64_t pos) const {
    const int64_t p = first_position(b) + pos;
    return order_.empty() ? p : order_[size_t(p)];
  }

  // Under mu_: (re)starts slot for batch b once the consumer released what it held.
  void open(int64_t b) {
    Slot& slot = slots_[size_t(b % s_.prefetch)];
    // The host buffer's last upload has left it. (A failure here resurfaces at the next CUDA call.)
    cudaEventSynchronize(slot.copied);
    slot.number = b;
    slot.size = std::min<int64_t>(s_.batch, source_.count() - first_position(b));
    slot.front = 0;
    slot.back = slot.size;
    slot.done = s_.batch - slot.size;
    slot.ready = slot.done == s_.batch;
    slot.handoff.clear();
    slot.on_host.assign(size_t(s_.batch), 0);
    slot.labels.assign(size_t(s_.batch), 0);
    slot.error = nullptr;
    for (int64_t p = slot.size; p < s_.batch; ++p) {  // padding of a last partial batch: zeros
      std::fill(slot.host + p * sample_bytes_, slot.host + (p + 1) * sample_bytes_, uint8_t(0));
      slot.on_host[size_t(p)] = 1;
    }
  }

  // Under mu_: the oldest buildable batch with unclaimed positions, opened if new; null if none.
  // `lead`: only among the next `lead` batches the consumer will ask for.
  Slot* claimable(int64_t lead = INT64_MAX / 2) {
    const int64_t last = std::min({batches_per_epoch(), released_ + s_.prefetch, delivered_ + lead});
    for (int64_t b = delivered_; b < last; ++b) {
      if (b == opened_) open(opened_++);
      Slot& slot = slots_[size_t(b % s_.prefetch)];
      if (slot.front < slot.back) return &slot;
    }
    return nullptr;
  }

  // Under mu_: positions finished (or failed) in `slot`.
  void finish(Slot& slot, int64_t count, std::exception_ptr error) {
    if (error && !slot.error) slot.error = error;
    slot.done += count;
    if (slot.done == s_.batch) {
      slot.ready = true;
      ready_cv_.notify_all();
    }
  }

  void run_feeder(Feeder& f) {
    cudaSetDevice(s_.device);
    std::vector<int64_t> to_cpu;
    std::vector<GpuCropPlan> plans(kGpuRun);
    std::unique_lock lock(mu_);
    while (true) {
      Slot* slot = nullptr;
      work_cv_.wait(lock, [&] { return stop_ || (slot = claimable(s_.gpu_lead)) != nullptr || all_claimed(); });
      if (stop_ || !slot) return;
      const int64_t b = slot->number, from = slot->front, to = std::min(slot->back, from + kGpuRun);
      slot->front = to;
      ++gpu_in_flight_;
      lock.unlock();
      std::exception_ptr error;
      to_cpu.clear();
      int64_t gpu_done = 0, finished = 0;
      try {
        finished = gpu_done = decode_run(f, *slot, b, from, to, plans, to_cpu);
      } catch (...) {
        error = std::current_exception();
      }
      if (!error && s_.workers == 0 && !to_cpu.empty()) {  // no CPU workers: the feeder decodes them
        error = decode_on_cpu(*slot, b, to_cpu);
        finished += int64_t(to_cpu.size());
        to_cpu.clear();
      }
      lock.lock();
      --gpu_in_flight_;
      gpu_samples_ += gpu_done;
      if (error) to_cpu.clear();  // the whole run counts as done, with the error
      slot->handoff.insert(slot->handoff.end(), to_cpu.begin(), to_cpu.end());
      finish(*slot, error ? to - from : finished, error);
      work_cv_.notify_all();
    }
  }

  // Under mu_: nothing is left to claim or hand off in this epoch (the threads may exit).
  bool all_claimed() const {
    if (opened_ < batches_per_epoch() || gpu_in_flight_ > 0) return false;
    for (const Slot& slot : slots_)
      if (slot.number >= delivered_ && (slot.front < slot.back || !slot.handoff.empty())) return false;
    return true;
  }

  // Decodes positions [from, to) of batch b on the GPU where it can; the rest go to `to_cpu`.
  // Returns how many the GPU produced (their pixels are in the slot's device buffer when it returns).
  int64_t decode_run(Feeder& f, Slot& slot, int64_t b, int64_t from, int64_t to, std::vector<GpuCropPlan>& plans,
                     std::vector<int64_t>& to_cpu) {
    std::vector<const unsigned char*> data;
    std::vector<size_t> lengths;
    std::vector<nvjpegImage_t> images;
    std::vector<int64_t> at;  // the position of each GPU sample
    std::vector<size_t> offsets;
    std::vector<int64_t> pitches;
    size_t total = 0;
    for (int64_t pos = from; pos < to; ++pos) {
      GpuCropPlan& plan = plans[size_t(at.size())];
      if (!source_.plan_gpu_crop(index_at(b, pos), s_.seed, epoch_, plan) || !gpu_can_decode(f, plan)) {
        to_cpu.push_back(pos);
        continue;
      }
      // The image's full size from nvJPEG's own parse (it must agree with the plan's box).
      int components = 0, widths[NVJPEG_MAX_COMPONENT] = {}, heights[NVJPEG_MAX_COMPONENT] = {};
      nvjpegChromaSubsampling_t subsampling;
      if (nvjpegGetImageInfo(handle_, plan.bytes.data(), plan.bytes.size(), &components, &subsampling, widths,
                             heights) != NVJPEG_STATUS_SUCCESS ||
          plan.x + plan.width > widths[0] || plan.y + plan.height > heights[0]) {
        to_cpu.push_back(pos);
        continue;
      }
      const int64_t pitch = int64_t(widths[0]) * 3;
      offsets.push_back(total);
      pitches.push_back(pitch);
      total += (size_t(pitch) * size_t(heights[0]) + 255) / 256 * 256;
      at.push_back(pos);
    }
    if (at.empty()) return 0;
    if (total > f.arena_bytes) {
      KILN_GD_CUDA(cudaStreamSynchronize(f.stream));
      KILN_GD_CUDA(cudaFree(f.arena));
      f.arena = nullptr, f.arena_bytes = 0;
      KILN_GD_CUDA(cudaMalloc(&f.arena, total));
      f.arena_bytes = total;
    }
    const int n = int(at.size());
    for (int i = 0; i < n; ++i) {
      data.push_back(plans[size_t(i)].bytes.data());
      lengths.push_back(plans[size_t(i)].bytes.size());
      nvjpegImage_t image{};
      image.channel[0] = f.arena + offsets[size_t(i)];
      image.pitch[0] = size_t(pitches[size_t(i)]);
      images.push_back(image);
    }
    KILN_NVJPEG(nvjpegDecodeBatchedInitialize(handle_, f.state, n, 1, NVJPEG_OUTPUT_RGBI));
    if (nvjpegDecodeBatched(handle_, f.state, data.data(), lengths.data(), images.data(), f.stream) !=
        NVJPEG_STATUS_SUCCESS) {
      // One bad stream fails the whole call: the CPU path decodes (or reports) each of them.
      KILN_GD_CUDA(cudaStreamSynchronize(f.stream));
      to_cpu.insert(to_cpu.end(), at.begin(), at.end());
      return 0;
    }
    for (int i = 0; i < n; ++i) {
      const GpuCropPlan& plan = plans[size_t(i)];
      CropJob& job = f.jobs_host[i];
      job.src = f.arena + offsets[size_t(i)];
      job.pitch = pitches[size_t(i)];
      job.x = plan.x, job.y = plan.y, job.width = plan.width, job.height = plan.height;
      job.flip = plan.flip ? 1 : 0;
      job.dst = slot.pixels->device + at[size_t(i)] * sample_bytes_;
      slot.labels[size_t(at[size_t(i)])] = plan.label;
    }
    KILN_GD_CUDA(cudaMemcpyAsync(f.jobs_device, f.jobs_host, sizeof(CropJob) * size_t(n), cudaMemcpyHostToDevice,
                                 f.stream));
    KILN_GD_CUDA(cudaStreamWaitEvent(f.stream, slot.pixels->consumed, 0));  // the last reads of this buffer
    launch_crop_resize(f.jobs_device, n, side_, f.stream);
    KILN_GD_CUDA(cudaGetLastError());
    KILN_GD_CUDA(cudaStreamSynchronize(f.stream));
    return n;
  }

  // Whether the GPU decoder takes this JPEG: three components (gray and CMYK go to the CPU, which
  // converts them as PIL does) and, for the hardware engines, a stream they support (baseline,
  // one scan, no 4:1:0 or 4:1:1 subsampling).
  bool gpu_can_decode(Feeder& f, const GpuCropPlan& plan) {
    if (nvjpegJpegStreamParseHeader(handle_, plan.bytes.data(), plan.bytes.size(), f.parser) != NVJPEG_STATUS_SUCCESS)
      return false;
    unsigned components = 0;
    if (nvjpegJpegStreamGetComponentsNum(f.parser, &components) != NVJPEG_STATUS_SUCCESS || components != 3)
      return false;
    if (!hardware_) return true;
    int unsupported = 1;
    return nvjpegDecodeBatchedSupported(handle_, f.parser, &unsupported) == NVJPEG_STATUS_SUCCESS && unsupported == 0;
  }

  std::exception_ptr decode_on_cpu(Slot& slot, int64_t b, const std::vector<int64_t>& positions) {
    try {
      for (int64_t pos : positions) {
        slot.labels[size_t(pos)] = source_.write_sample(index_at(b, pos), s_.seed, epoch_, slot.host + pos * sample_bytes_);
        slot.on_host[size_t(pos)] = 1;
      }
      cpu_samples_ += int64_t(positions.size());
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }

  void run_worker() {
    std::vector<int64_t> positions;
    std::unique_lock lock(mu_);
    while (true) {
      Slot* slot = nullptr;
      work_cv_.wait(lock, [&] { return stop_ || (slot = cpu_work()) != nullptr || all_claimed(); });
      if (stop_ || !slot) return;
      positions.clear();
      if (!slot->handoff.empty()) {
        const size_t take = std::min<size_t>(kCpuRun, slot->handoff.size());
        positions.assign(slot->handoff.end() - long(take), slot->handoff.end());
        slot->handoff.resize(slot->handoff.size() - take);
      } else {
        const int64_t to = slot->back, from = std::max(slot->front, to - kCpuRun);
        slot->back = from;
        for (int64_t p = from; p < to; ++p) positions.push_back(p);
      }
      const int64_t b = slot->number;
      lock.unlock();
      std::exception_ptr error = decode_on_cpu(*slot, b, positions);
      lock.lock();
      finish(*slot, int64_t(positions.size()), error);
    }
  }

  // Under mu_: a slot with positions handed off by the GPU, else one with unclaimed positions.
  Slot* cpu_work() {
    for (int64_t b = delivered_; b < opened_; ++b) {
      Slot& slot = slots_[size_t(b % s_.prefetch)];
      if (slot.number == b && !slot.handoff.empty()) return &slot;
    }
    return claimable();
  }

  // After a batch is complete: the CPU-decoded samples go up beside the GPU's, then `ready`.
  void upload_host_samples(Slot& slot) {
    KILN_GD_CUDA(cudaStreamWaitEvent(copy_stream_, slot.pixels->consumed, 0));
    for (int64_t p = 0; p < s_.batch;) {
      if (!slot.on_host[size_t(p)]) {
        ++p;
        continue;
      }
      int64_t q = p;
      while (q < s_.batch && slot.on_host[size_t(q)]) ++q;
      KILN_GD_CUDA(cudaMemcpyAsync(slot.pixels->device + p * sample_bytes_, slot.host + p * sample_bytes_,
                                   size_t((q - p) * sample_bytes_), cudaMemcpyHostToDevice, copy_stream_));
      p = q;
    }
    KILN_GD_CUDA(cudaEventRecord(slot.copied, copy_stream_));
    KILN_GD_CUDA(cudaEventRecord(slot.pixels->ready, copy_stream_));
  }

  void stop_threads() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    stop_ = false;
  }

  const SampleSource& source_;
  GpuDecodeSettings s_;
  int side_ = 0;
  int64_t sample_bytes_ = 0;
  nvjpegHandle_t handle_ = nullptr;
  bool hardware_ = false;
  cudaStream_t copy_stream_ = nullptr;
  std::vector<Slot> slots_;
  std::vector<Feeder> feeders_;

  // Guarded by mu_.
  int epoch_ = 0;
  bool started_ = false, stop_ = false;
  std::vector<int64_t> order_;
  int64_t delivered_ = 0, released_ = 0, opened_ = 0;
  int gpu_in_flight_ = 0;  // GPU runs claimed and not yet finished
  std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  std::vector<std::thread> threads_;
  std::atomic<int64_t> gpu_samples_{0}, cpu_samples_{0};
  std::atomic<double> paced_{0};  // consumer thread writes, reports read
};

}  // namespace

bool gpu_decode_built() { return true; }

std::unique_ptr<BatchStream> make_gpu_decode_loader(const SampleSource& source, const GpuDecodeSettings& settings) {
  return std::make_unique<GpuDecodeLoader>(source, settings);
}

}  // namespace kiln

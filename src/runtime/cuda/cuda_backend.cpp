#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/pixel_normalize_cuda.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/device.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cudnn_graphs.h"
#include "runtime/cuda/env_settings.h"
#include "runtime/cuda/step_scalars_cuda.h"
#include "runtime/cuda/tune_log.h"

namespace kiln::cuda {

static_assert(sizeof(StepScalars) == sizeof(StepScalarBytes) && alignof(StepScalars) <= alignof(StepScalarBytes),
              "StepScalarBytes must hold StepScalars");

namespace {
StepScalarBytes bytes_of(const StepScalars& s) {
  StepScalarBytes b{};
  std::memcpy(b.bytes, &s, sizeof(s));
  return b;
}
}  // namespace

CudaBackend::CudaBackend(int index, const CudaOptions& options) {
  const int count = cuda_device_count();
  if (count == 0) fail("no CUDA device is visible; use --device cpu");
  if (index < 0 || index >= count)
    fail("CUDA device {} was asked for but {} GPU(s) are visible; use --device cuda:0 to cuda:{}", index, count,
         count - 1);
  device_ = index;
  check_cuda_options(options);
  options_ = with_env_overrides(options);
  KILN_CUDA(cudaSetDevice(device_), "cuda backend");
  int least = 0, greatest = 0;
  KILN_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cuda backend");
  for (int i = 0; i < kStreams; ++i) {
    const int priority = i == 0 ? greatest : least;
    KILN_CUDA(cudaStreamCreateWithPriority(&streams_[i], cudaStreamNonBlocking, priority), "cuda backend");
    KILN_CUDA(cudaEventCreateWithFlags(&events_[i], cudaEventDisableTiming), "cuda backend");
  }
  for (cudaEvent_t& e : deferred_) KILN_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cuda backend");
  KILN_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "cuda backend");
  KILN_CUDA(cudaMalloc(&device_scalars_, sizeof(StepScalars)), "step scalars");
  KILN_CUDA(cudaMemset(device_scalars_, 0, sizeof(StepScalars)), "step scalars");
  KILN_CUDA(cudaDeviceSynchronize(), "step scalars");
}

namespace {

// One graph cache per device and graph options for the whole process: every executable on a
// device shares the built and tuned plans, so a shape is tuned once however many programs use it
// (programs asking for other graph options — tuning and its bounds, TF32, determinism, workspace,
// timed runs, plan cache file — get a cache of their own: the cache applies its own options to every graph).
using GraphCacheKey = std::tuple<int, bool, bool, bool, int64_t, int, int, double, std::string>;
using GraphCaches = std::map<GraphCacheKey, std::shared_ptr<CudnnGraphs>>;

// Never destroyed as statics are: release_graph_caches empties it at exit.
GraphCaches& graph_caches() {
  static auto* caches = new GraphCaches;
  return *caches;
}
std::mutex& graph_caches_mutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}

// Destroys the caches (and their cuDNN handles) at exit, before cuDNN's own teardown: the first
// cudnnCreate registers that teardown, so this handler, registered after it, runs first. A handle
// destroyed after cuDNN's teardown keeps its device memory (compute-sanitizer's leak check: 25 KiB
// and two 4-byte buffers per handle), which a static map, built before the first handle, did.
// Backends still alive at exit keep their cache to the end.
void release_graph_caches() {
  std::lock_guard<std::mutex> lock(graph_caches_mutex());
  graph_caches().clear();
}

std::shared_ptr<CudnnGraphs> shared_graphs(int device, const CudaOptions& options) {
  const CudnnGraphsOptions o = cudnn_graphs_options(options);
  std::lock_guard<std::mutex> lock(graph_caches_mutex());
  auto& cache = graph_caches()[GraphCacheKey{device, o.tune, o.allow_tf32, o.prefer_deterministic,
                                             o.max_workspace_bytes, o.timed_runs, o.max_plans_tuned, o.tune_budget_s,
                                             o.plan_cache}];
  if (!cache) {
    cache = std::make_shared<CudnnGraphs>(o);
    static const bool registered = std::atexit(release_graph_caches) == 0;
    (void)registered;
  }
  return cache;
}
}  // namespace

std::string CudaBackend::prepare_status() const { return graphs_ ? graphs_->progress() : std::string(); }

CudaBackend::~CudaBackend() {
  // Destructors must not throw: errors here only mean the device is already gone.
  if (graphs_) append_tune_log(*graphs_, options_.tune_log);
  for (Captured& c : captured_) release(c);
  for (cudaEvent_t e : deferred_)
    if (e) cudaEventDestroy(e);
  if (copy_stream_) cudaStreamSynchronize(copy_stream_);
  for (Staging& s : staging_) {
    if (s.copied) cudaEventDestroy(s.copied);
    if (s.taken) cudaEventDestroy(s.taken);
    if (s.host) cudaFreeHost(s.host);
    if (s.device) cudaFree(s.device);
  }
  if (copy_stream_) cudaStreamDestroy(copy_stream_);
  if (device_scalars_) cudaFree(device_scalars_);
  if (gather_) cudaFreeHost(gather_);
  if (comm_stream_) cudaStreamSynchronize(comm_stream_), cudaStreamDestroy(comm_stream_);
  for (cudaEvent_t e : comm_events_)
    if (e) cudaEventDestroy(e);
  for (int i = 0; i < kStreams; ++i) {
    if (workspace_[i]) cudaFree(workspace_[i]);
    if (events_[i]) cudaEventDestroy(events_[i]);
    if (streams_[i]) cudaStreamDestroy(streams_[i]);
  }
}

std::byte* CudaBackend::allocate(size_t bytes) {
  activate();
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, std::max<size_t>(bytes, 256));
  if (status != cudaSuccess)
    fail("cannot allocate the {:.1f} MiB device arena of this program ({}); use a smaller batch",
         double(bytes) / 1048576.0, cudaGetErrorString(status));
  // On the main stream, and waited for: kiln's streams are non-blocking, so a memset on the legacy
  // default stream is not ordered before their work and could zero the first inputs copied in
  // (seen on the H200: small programs with nothing to prepare read zeros).
  KILN_CUDA(cudaMemsetAsync(p, 0, bytes, main_stream()), "device arena");
  KILN_CUDA(cudaStreamSynchronize(main_stream()), "device arena");
  return static_cast<std::byte*>(p);
}

void CudaBackend::release(std::byte* memory) { cudaFree(memory); }

void CudaBackend::copy_in(void* dst, const void* src, size_t bytes) {
  activate();
  KILN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, main_stream()), "copy to device");
  KILN_CUDA(cudaStreamSynchronize(main_stream()), "copy to device");
}

void CudaBackend::zero(void* dst, size_t bytes) {
  activate();
  KILN_CUDA(cudaMemsetAsync(dst, 0, bytes, main_stream()), "zeroing device memory");
  KILN_CUDA(cudaStreamSynchronize(main_stream()), "zeroing device memory");
}

CudaBackend::Staging& CudaBackend::stage(const void* src, size_t bytes, const char* what) {
  activate();
  Staging& s = staging_[next_staging_];
  next_staging_ = (next_staging_ + 1) % kStaging;
  if (s.copied) KILN_CUDA(cudaEventSynchronize(s.copied), what);  // `host` is free again
  if (s.bytes < bytes) {
    if (s.taken) KILN_CUDA(cudaEventSynchronize(s.taken), what);  // nothing reads `device` any more
    if (s.host) KILN_CUDA(cudaFreeHost(s.host), what);
    if (s.device) KILN_CUDA(cudaFree(s.device), what);
    s.host = s.device = nullptr, s.bytes = 0;
    KILN_CUDA(cudaMallocHost(&s.host, bytes), what);
    KILN_CUDA(cudaMalloc(&s.device, bytes), what);
    s.bytes = bytes;
  }
  if (!s.copied) KILN_CUDA(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming), what);
  if (!s.taken) KILN_CUDA(cudaEventCreateWithFlags(&s.taken, cudaEventDisableTiming), what);
  std::memcpy(s.host, src, bytes);
  // The copy stream overwrites `device` once the main stream has taken its previous bytes (an
  // event never recorded is already complete).
  KILN_CUDA(cudaStreamWaitEvent(copy_stream_, s.taken, 0), what);
  KILN_CUDA(cudaMemcpyAsync(s.device, s.host, bytes, cudaMemcpyHostToDevice, copy_stream_), what);
  KILN_CUDA(cudaEventRecord(s.copied, copy_stream_), what);
  KILN_CUDA(cudaStreamWaitEvent(main_stream(), s.copied, 0), what);
  return s;
}

void CudaBackend::copy_in_ordered(void* dst, const void* src, size_t bytes) {
  const char* what = "staged copy to device";
  Staging& s = stage(src, bytes, what);
  KILN_CUDA(cudaMemcpyAsync(dst, s.device, bytes, cudaMemcpyDeviceToDevice, main_stream()), what);
  KILN_CUDA(cudaEventRecord(s.taken, main_stream()), what);
}

void CudaBackend::normalize_in_ordered(float* dst, const uint8_t* pixels, int64_t count, const PixelNormalization& n) {
  const char* what = "staged pixels to device";
  Staging& s = stage(pixels, size_t(count), what);
  launch_normalize_pixels(dst, static_cast<const uint8_t*>(s.device), count, n, main_stream());
  KILN_CUDA(cudaGetLastError(), what);
  KILN_CUDA(cudaEventRecord(s.taken, main_stream()), what);
}

void CudaBackend::normalize_device_pixels_ordered(float* dst, DevicePixels& pixels, int64_t count,
                                                  const PixelNormalization& n) {
  activate();
  const char* what = "GPU-decoded pixels to the input";
  KILN_CUDA(cudaStreamWaitEvent(main_stream(), static_cast<cudaEvent_t>(pixels.ready_event()), 0), what);
  launch_normalize_pixels(dst, pixels.data(), count, n, main_stream());
  KILN_CUDA(cudaGetLastError(), what);
  pixels.read_on(main_stream());
}

void CudaBackend::copy_out(void* dst, const void* src, size_t bytes) {
  activate();
  KILN_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, main_stream()), "copy from device");
  KILN_CUDA(cudaStreamSynchronize(main_stream()), "copy from device");
}

void CudaBackend::copy_out_many(const std::vector<CopyOut>& copies) {
  activate();
  // Each copy at its own 256-byte aligned place in the pinned buffer.
  std::vector<size_t> at(copies.size());
  size_t total = 0;
  for (size_t i = 0; i < copies.size(); ++i) at[i] = total, total += (copies[i].bytes + 255) / 256 * 256;
  if (total > gather_bytes_) {
    if (gather_) KILN_CUDA(cudaFreeHost(gather_), "copy from device");
    gather_ = nullptr, gather_bytes_ = 0;
    KILN_CUDA(cudaMallocHost(&gather_, total), "copy from device");
    gather_bytes_ = total;
  }
  std::byte* gather = static_cast<std::byte*>(gather_);
  for (size_t i = 0; i < copies.size(); ++i)
    KILN_CUDA(cudaMemcpyAsync(gather + at[i], copies[i].src, copies[i].bytes, cudaMemcpyDeviceToHost, main_stream()),
              "copy from device");
  KILN_CUDA(cudaStreamSynchronize(main_stream()), "copy from device");
  for (size_t i = 0; i < copies.size(); ++i) std::memcpy(copies[i].host_dst, gather + at[i], copies[i].bytes);
}

void CudaBackend::request_workspace(size_t bytes, int stream) {
  if (stream < 0 || stream >= kStreams) fail("internal: workspace requested for stream {} of {}", stream, kStreams);
  requested_bytes_[stream] = std::max(requested_bytes_[stream], bytes);
}

void CudaBackend::finish_prepare() {
  for (int i = 0; i < kStreams; ++i) {
    if (requested_bytes_[i] <= workspace_bytes_[i]) continue;
    if (workspace_[i]) KILN_CUDA(cudaFree(workspace_[i]), "workspace");
    workspace_[i] = nullptr, workspace_bytes_[i] = 0;
    if (cudaMalloc(&workspace_[i], requested_bytes_[i]) != cudaSuccess)
      fail("cannot allocate {:.1f} MiB of op workspace; use a smaller batch", double(requested_bytes_[i]) / 1048576.0);
    workspace_bytes_[i] = requested_bytes_[i];
  }
}

size_t CudaBackend::workspace_total_bytes() const { return workspace_bytes_[0] + workspace_bytes_[1]; }

void CudaBackend::synchronize() {
  activate();
  for (cudaStream_t stream : streams_) KILN_CUDA(cudaStreamSynchronize(stream), "synchronize");
  KILN_CUDA(cudaStreamSynchronize(copy_stream_), "synchronize");
  if (comm_stream_) KILN_CUDA(cudaStreamSynchronize(comm_stream_), "synchronize");
  previous_pending_ = deferred_now_ = false;  // all done: nothing left to wait for
}

void CudaBackend::activate() { KILN_CUDA(cudaSetDevice(device_), "cuda backend"); }

void CudaBackend::stage_scalars(const StepScalars& s) {
  activate();
  write_step_scalars(bytes_of(s), reinterpret_cast<StepScalarBytes*>(device_scalars_), main_stream());
  KILN_CUDA(cudaGetLastError(), "step scalars");
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  KILN_CUDA(cudaStreamIsCapturing(main_stream(), &capturing), "step scalars");
  if (capturing == cudaStreamCaptureStatusNone) return;
  // Under capture the write just became the node the main stream's next work depends on: kept,
  // so that replay() can give it each step's values.
  const cudaGraphNode_t* last = nullptr;
  size_t count = 0;
  KILN_CUDA(cudaStreamGetCaptureInfo(main_stream(), &capturing, nullptr, nullptr, &last, nullptr, &count),
            "step scalars");
  if (count != 1 || !last) fail("internal: the captured write of the step scalars is not the stream's last node");
  capture_scalar_nodes_.push_back(last[0]);
}

void CudaBackend::release(Captured& c) {
  if (c.exec) cudaGraphExecDestroy(c.exec);
  if (c.graph) cudaGraphDestroy(c.graph);
  c = Captured{};
}

void CudaBackend::begin_capture() {
  activate();
  // Thread-local: the data loader's threads may call the CUDA runtime meanwhile (pinned memory).
  capture_scalar_nodes_.clear();
  KILN_CUDA(cudaStreamBeginCapture(main_stream(), cudaStreamCaptureModeThreadLocal), "CUDA Graph capture");
}

void CudaBackend::end_capture(int graph) {
  cudaGraph_t captured = nullptr;
  KILN_CUDA(cudaStreamEndCapture(main_stream(), &captured), "CUDA Graph capture");
  if (graph >= int(captured_.size())) captured_.resize(size_t(graph) + 1);
  Captured& c = captured_[size_t(graph)];
  release(c);
  c.graph = captured;
  c.scalar_nodes = std::move(capture_scalar_nodes_);  // replay() gives them each step's values
  capture_scalar_nodes_.clear();
  const cudaError_t status = cudaGraphInstantiate(&c.exec, captured, 0);
  if (status != cudaSuccess) {
    c.exec = nullptr;
    release(c);
    fail("cannot instantiate the captured CUDA Graph ({}); use --cuda-graphs 0", cudaGetErrorString(status));
  }
}

void CudaBackend::abort_capture() {
  // Events recorded in the abandoned capture must not be waited for outside it.
  previous_pending_ = deferred_now_ = averages_pending_ = false;
  capture_scalar_nodes_.clear();
  cudaGraph_t partial = nullptr;
  if (cudaStreamEndCapture(main_stream(), &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
  cudaGetLastError();  // the capture's own error was reported by whoever failed
}

void CudaBackend::replay(int graph, const StepScalars& s) {
  activate();
  if (graph >= int(captured_.size()) || !captured_[size_t(graph)].exec)
    fail("internal: CUDA Graph {} was never captured", graph);
  Captured& c = captured_[size_t(graph)];
  // This launch's scalars become the argument of the graph's scalar nodes; launches already
  // queued keep theirs, so the host does not wait for them.
  StepScalarBytes bytes = bytes_of(s);
  StepScalarBytes* dst = reinterpret_cast<StepScalarBytes*>(device_scalars_);
  void* args[] = {&bytes, &dst};
  cudaKernelNodeParams params{};
  params.func = const_cast<void*>(write_step_scalars_kernel());
  params.gridDim = dim3(1), params.blockDim = dim3(1), params.sharedMemBytes = 0;
  params.kernelParams = args, params.extra = nullptr;
  for (cudaGraphNode_t node : c.scalar_nodes)
    KILN_CUDA(cudaGraphExecKernelNodeSetParams(c.exec, node, &params), "CUDA Graph replay");
  KILN_CUDA(cudaGraphLaunch(c.exec, main_stream()), "CUDA Graph replay");
}

void CudaBackend::order(int from, int to) {
  KILN_CUDA(cudaEventRecord(events_[from], streams_[from]), "stream order");
  KILN_CUDA(cudaStreamWaitEvent(streams_[to], events_[from], 0), "stream order");
}

void CudaBackend::before_op(const Op& op) {
  may_defer_ = op.side_work_outlives;
  deferred_now_ = false;
}

void CudaBackend::end_side_work() {
  if (!may_defer_) return order(1, 0);
  KILN_CUDA(cudaEventRecord(deferred_[slot_], streams_[1]), "stream order");
  deferred_now_ = true;
}

void CudaBackend::join_previous() {
  if (previous_pending_) KILN_CUDA(cudaStreamWaitEvent(main_stream(), deferred_[slot_ ^ 1], 0), "stream order");
  previous_pending_ = false;
}

void CudaBackend::after_op() {
  // The op before this one may have left work on the side stream: the next op starts after it.
  join_previous();
  previous_pending_ = deferred_now_;
  deferred_now_ = false, may_defer_ = false;
  slot_ ^= 1;
}

void CudaBackend::after_ops() { join_previous(); }

void CudaBackend::make_comm_stream() {
  if (comm_stream_) return;
  // The highest priority: a rank late with its share of a collective holds every other rank up.
  int least = 0, greatest = 0;
  KILN_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest), "data parallel");
  KILN_CUDA(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest), "data parallel");
  for (cudaEvent_t& e : comm_events_) KILN_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "data parallel");
}

void CudaBackend::average_over_ranks(ProcessGroup& group, void* data, size_t count, DType dtype) {
  activate();
  make_comm_stream();
  // Everything issued so far on every stream, the side streams' wgrad included (deferred or not).
  // Under CUDA Graph capture a stream that has not joined the capture holds none of the step's
  // work, and waiting on an event recorded there is an error (cudaErrorStreamCaptureIsolation).
  cudaStreamCaptureStatus main_capture = cudaStreamCaptureStatusNone;
  KILN_CUDA(cudaStreamIsCapturing(main_stream(), &main_capture), "data parallel");
  for (int i = 0; i < kStreams; ++i) {
    cudaStream_t s = streams_[i];
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    KILN_CUDA(cudaStreamIsCapturing(s, &capture), "data parallel");
    if (main_capture == cudaStreamCaptureStatusActive && capture != cudaStreamCaptureStatusActive) continue;
    cudaEvent_t& ready = comm_events_[i];
    KILN_CUDA(cudaEventRecord(ready, s), "data parallel");
    KILN_CUDA(cudaStreamWaitEvent(comm_stream_, ready, 0), "data parallel");
  }
  group.average(data, count, dtype, comm_stream_);
  averages_pending_ = true;
}

void CudaBackend::join_rank_averages() {
  if (!averages_pending_) return;
  cudaEvent_t& done = comm_events_[kStreams];
  KILN_CUDA(cudaEventRecord(done, comm_stream_), "data parallel");
  KILN_CUDA(cudaStreamWaitEvent(main_stream(), done, 0), "data parallel");
  averages_pending_ = false;
}

void CudaBackend::broadcast_over_ranks(ProcessGroup& group, void* data, size_t bytes, int root) {
  activate();
  group.broadcast(data, bytes, root, main_stream());
}

CudnnGraphs& CudaBackend::graphs() {
  if (!graphs_) graphs_ = shared_graphs(device_, options_);
  return *graphs_;
}

CudaBackend& cuda_backend(Backend* backend, const std::string& where) {
  auto* cuda = dynamic_cast<CudaBackend*>(backend);
  if (!cuda) fail("{}: a CUDA op was called without the CUDA backend", where);
  return *cuda;
}

}  // namespace kiln

namespace kiln {
int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the sticky error, report none
    return 0;
  }
  return count;
}

size_t cuda_memory_in_use(int index) {
  if (index < 0 || index >= cuda_device_count()) return 0;
  int current = 0;
  KILN_CUDA(cudaGetDevice(&current), "device memory");
  KILN_CUDA(cudaSetDevice(index), "device memory");
  size_t free = 0, total = 0;
  KILN_CUDA(cudaMemGetInfo(&free, &total), "device memory");
  KILN_CUDA(cudaSetDevice(current), "device memory");
  return total - free;
}

std::unique_ptr<Backend> make_cuda_backend(int index, const CudaOptions& options) {
  return std::make_unique<cuda::CudaBackend>(index, options);
}
}  // namespace kiln

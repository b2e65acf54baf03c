#include "runtime/cuda/cuda_backend.h"

#include "kiln/device.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cudnn_graph_caches.h"
#include "runtime/cuda/cudnn_graphs.h"
#include "runtime/cuda/env_settings.h"
#include "runtime/cuda/pixel_normalize_cuda.h"
#include "runtime/cuda/tune_log.h"

namespace kiln::cuda {

CudaBackend::OpenedGpu::OpenedGpu(int gpu, const CudaOptions& given) {
  const int count = cuda_device_count();
  if (count == 0) fail("no CUDA device is visible; use --device cpu");
  if (gpu < 0 || gpu >= count)
    fail("CUDA device {} was asked for but {} GPU(s) are visible; use --device cuda:0 to cuda:{}", gpu, count,
         count - 1);
  index = gpu;
  check_cuda_options(given);
  options = with_env_overrides(given);
  KILN_CUDA(cudaSetDevice(index), "cuda backend");
}

CudaBackend::CudaBackend(int index, const CudaOptions& options) : gpu_(index, options) {}

CudaBackend::~CudaBackend() {
  // Destructors must not throw: errors here only mean the device is already gone. The parts
  // release their own streams and memory.
  if (graphs_) append_tune_log(*graphs_, gpu_.options.tune_log);
}

std::string CudaBackend::prepare_status() const { return graphs_ ? graphs_->progress() : std::string(); }

CudnnGraphs& CudaBackend::graphs() {
  if (!graphs_) graphs_ = shared_cudnn_graphs(gpu_.index, gpu_.options);
  return *graphs_;
}

void CudaBackend::activate() { KILN_CUDA(cudaSetDevice(gpu_.index), "cuda backend"); }

// --- Memory and staging (device_memory.h, host_staging.h) ---

std::byte* CudaBackend::allocate(size_t bytes) {
  activate();
  return allocate_arena(bytes, main_stream());
}

void CudaBackend::release(std::byte* memory) { cudaFree(memory); }

void CudaBackend::copy_in(void* dst, const void* src, size_t bytes) {
  activate();
  copy_to_device(dst, src, bytes, main_stream());
}

void CudaBackend::zero(void* dst, size_t bytes) {
  activate();
  zero_device(dst, bytes, main_stream());
}

void CudaBackend::copy_out(void* dst, const void* src, size_t bytes) {
  activate();
  copy_to_host(dst, src, bytes, main_stream());
}

void CudaBackend::copy_out_many(const std::vector<CopyOut>& copies) {
  activate();
  staging_.copy_out_many(copies, main_stream());
}

void CudaBackend::copy_in_ordered(void* dst, const void* src, size_t bytes) {
  activate();
  staging_.copy_in_ordered(dst, src, bytes, main_stream());
}

void CudaBackend::normalize_in_ordered(float* dst, const uint8_t* pixels, int64_t count, const PixelNormalization& n) {
  activate();
  staging_.normalize_in_ordered(dst, pixels, count, n, main_stream());
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

void CudaBackend::request_workspace(size_t bytes, int stream) { workspaces_.request(bytes, stream); }

void CudaBackend::finish_prepare() { workspaces_.allocate_requested(); }

size_t CudaBackend::workspace_total_bytes() const { return workspaces_.total_bytes(); }

// --- The stream schedule (stream_schedule.h) ---

void CudaBackend::synchronize() {
  activate();
  schedule_.synchronize();
  staging_.synchronize();
  collectives_.synchronize();
  schedule_.forget_pending();  // all done: nothing left to wait for
}

void CudaBackend::before_op(const Op& op) { schedule_.before_op(op.side_work_outlives); }

void CudaBackend::after_op() { schedule_.after_op(); }

void CudaBackend::after_ops() { schedule_.after_ops(); }

// --- CUDA Graph capture and replay (graph_capture.h) ---

void CudaBackend::stage_scalars(const StepScalars& s) {
  activate();
  capture_.stage_scalars(s, main_stream());
}

void CudaBackend::begin_capture() {
  activate();
  capture_.begin(main_stream());
}

void CudaBackend::end_capture(int graph) { capture_.end(graph, main_stream()); }

void CudaBackend::abort_capture() {
  // Events recorded in the abandoned capture must not be waited for outside it.
  schedule_.forget_pending();
  collectives_.forget_pending();
  capture_.abort(main_stream());
}

void CudaBackend::replay(int graph, const StepScalars& s) {
  activate();
  capture_.replay(graph, s, main_stream());
}

// --- Data parallel (rank_collectives.h) ---

void CudaBackend::average_over_ranks(ProcessGroup& group, void* data, size_t count, DType dtype) {
  activate();
  collectives_.average(group, data, count, dtype, schedule_);
}

void CudaBackend::join_rank_averages() { collectives_.join(main_stream()); }

void CudaBackend::broadcast_over_ranks(ProcessGroup& group, void* data, size_t bytes, int root) {
  activate();
  collectives_.broadcast(group, data, bytes, root, main_stream());
}

CudaBackend& cuda_backend(Backend* backend, const std::string& where) {
  auto* cuda = dynamic_cast<CudaBackend*>(backend);
  if (!cuda) fail("{}: a CUDA op was called without the CUDA backend", where);
  return *cuda;
}

}  // namespace kiln::cuda

namespace kiln {
std::unique_ptr<Backend> make_cuda_backend(int index, const CudaOptions& options) {
  return std::make_unique<cuda::CudaBackend>(index, options);
}
}  // namespace kiln

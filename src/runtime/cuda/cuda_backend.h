#pragma once
// The CUDA backend: one GPU, tying together the parts that each hold one concern —
//   device_memory.h     the program's arena, the copies the host waits for, each stream's workspace;
//   host_staging.h      pinned host buffers: batches staged in on a copy stream, copies gathered out;
//   stream_schedule.h   the main and side streams and the per-op placement the Program carries;
//   graph_capture.h     CUDA Graph capture and replay of the step, with the step's scalars;
//   rank_collectives.h  data parallel: gradient averages and broadcasts over the ranks;
//   cudnn_graph_caches.h  the process-wide cuDNN graph cache this backend's ops share.
// Every call that touches the GPU makes it current first (activate), so backends of several GPUs
// may be used from one thread.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/options.h"
#include "runtime/backend.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/cuda/graph_capture.h"
#include "runtime/cuda/host_staging.h"
#include "runtime/cuda/rank_collectives.h"
#include "runtime/cuda/stream_schedule.h"

namespace kiln::cuda {

class CudnnGraphs;

class CudaBackend final : public Backend {
 public:
  static constexpr int kStreams = StreamSchedule::kStreams;  // 0: main, 1: side (e.g. wgrad beside dgrad)

  // GPU `index` with `options` (CompileOptions::cuda), the KILN_* environment variables set in
  // place of their fields (env_settings.h); kiln::Error for a field out of range, a malformed
  // variable or a GPU that is not there.
  explicit CudaBackend(int index, const CudaOptions& options = {});
  ~CudaBackend() override;

  Device device() const override { return Device::CUDA; }
  std::byte* allocate(size_t bytes) override;
  void release(std::byte* memory) override;
  void copy_in(void* dst, const void* host_src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  void copy_out(void* host_dst, const void* src, size_t bytes) override;
  // Into one pinned buffer on the main stream, one wait, then out to the hosts' memory.
  void copy_out_many(const std::vector<CopyOut>& copies) override;
  // Through the staging buffers (host_staging.h): the next batch crosses PCIe on a copy stream
  // while the current step trains, and the main stream takes it into the tensor in its order.
  void copy_in_ordered(void* dst, const void* host_src, size_t bytes) override;
  // The same staging for the uint8 pixels; the main stream then converts them into `dst`
  // (pixel_normalize_cuda.h) instead of copying.
  void normalize_in_ordered(float* dst, const uint8_t* pixels, int64_t count, const PixelNormalization& n) override;
  void normalize_device_pixels_ordered(float* dst, DevicePixels& pixels, int64_t count,
                                       const PixelNormalization& n) override;
  void request_workspace(size_t bytes, int stream = 0) override;
  void finish_prepare() override;
  std::string prepare_status() const override;
  void synchronize() override;
  void activate() override;
  const StepScalars* device_scalars() const override { return capture_.device_scalars(); }
  void stage_scalars(const StepScalars& s) override;
  bool can_capture() const override { return options().graphs; }
  // Captures the work issued on the main stream (and the streams it waits on) until end_capture,
  // which instantiates it as graph `graph`; replay(graph) launches it on the main stream.
  void begin_capture() override;
  void end_capture(int graph) override;
  void abort_capture() override;
  void replay(int graph, const StepScalars& s) override;

  // Stream `index`: 0 the main stream, 1 the side stream.
  cudaStream_t stream(int index = 0) const { return schedule_.stream(index); }
  // Makes stream `to` wait for all work issued so far on stream `from`.
  void order(int from, int to) { schedule_.order(from, to); }
  // An op calls this once it has issued its side-stream work. The main stream waits for that
  // work now, or, where the program lets the op's side work outlive it (Op::side_work_outlives),
  // at the end of the next op, so it overlaps that op; the memory plan keeps the op's tensors
  // alive until then.
  void end_side_work() { schedule_.end_side_work(); }
  void before_op(const Op& op) override;
  void after_op() override;
  void after_ops() override;
  // On a communication stream of its own, which waits for the main and side streams' work so far.
  void average_over_ranks(ProcessGroup& group, void* data, size_t count, DType dtype) override;
  void join_rank_averages() override;
  void broadcast_over_ranks(ProcessGroup& group, void* data, size_t bytes, int root) override;
  // Scratch memory for work on stream `index`, sized by the requests for that stream (so the side
  // stream's, used by wgrad only, is only as large as the largest of those); ops never share one
  // workspace across streams.
  void* workspace(int index = 0) const { return workspaces_.workspace(index); }
  size_t workspace_bytes(int index = 0) const { return workspaces_.bytes(index); }
  size_t workspace_total_bytes() const override;
  CudnnGraphs& graphs();
  int device_ordinal() const { return gpu_.index; }
  // The options in effect (environment overrides applied).
  const CudaOptions& options() const { return gpu_.options; }

 private:
  // The GPU, checked, with the options in effect, and made current. The first member: every
  // member after it makes its streams and memory on that GPU.
  struct OpenedGpu {
    OpenedGpu(int index, const CudaOptions& options);
    int index = 0;
    CudaOptions options;
  };
  OpenedGpu gpu_;
  // The process-wide cache of this device and graph options (cudnn_graph_caches.h), made at first
  // use; released after the members below.
  std::shared_ptr<CudnnGraphs> graphs_;
  StreamSchedule schedule_;
  StreamWorkspaces workspaces_;
  HostStaging staging_;
  GraphCapture capture_;
  RankCollectives collectives_;
  cudaStream_t main_stream() const { return schedule_.main_stream(); }
};

// The CUDA backend of an op call (a kiln::Error if the call runs on another backend).
CudaBackend& cuda_backend(Backend* backend, const std::string& where);

}  // namespace kiln::cuda

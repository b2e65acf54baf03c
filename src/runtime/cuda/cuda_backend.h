#pragma once
// The CUDA backend: one device arena, a main and a side stream with events between them, the
// cuDNN handle and graph cache, and per-stream workspaces sized while ops are prepared. Every op
// runs on the main stream; an op's wgrad may run on the side stream beside its dgrad, and on
// beside the next op where the program says so (Op::side_work_outlives, compile/op_streams.h).
//
// The main stream has the higher priority: when an op overlaps short memory-bound kernels on the
// main stream with a long convolution on the side stream, the block scheduler hands freed SMs to
// the main stream's kernels first, so they are not starved until the convolution drains.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "kiln/options.h"
#include "runtime/backend.h"

namespace kiln::cuda {

class CudnnGraphs;

class CudaBackend final : public Backend {
 public:
  static constexpr int kStreams = 2;  // 0: main, 1: side (e.g. wgrad beside dgrad)

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
  // Through staging buffers used in turn (kStaging of them, each pinned host memory and a device
  // copy): the host copies the batch into one and goes on; a copy stream moves it to the device
  // while the main stream still runs the steps queued before it, and the main stream then takes
  // it into the tensor with a device-to-device copy in its order. So the next batch crosses PCIe
  // while the current step trains. A buffer is refilled only once its last copies have left it.
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
  const StepScalars* device_scalars() const override { return device_scalars_; }
  void stage_scalars(const StepScalars& s) override;
  bool can_capture() const override { return options_.graphs; }
  // Captures the work issued on the main stream (and the streams it waits on) until end_capture,
  // which instantiates it as graph `graph`; replay(graph) launches it on the main stream.
  void begin_capture() override;
  void end_capture(int graph) override;
  void abort_capture() override;
  void replay(int graph, const StepScalars& s) override;

  // Stream `index`: 0 the main stream, 1 the side stream.
  cudaStream_t stream(int index = 0) const { return streams_[index]; }
  // Makes stream `to` wait for all work issued so far on stream `from`.
  void order(int from, int to);
  // An op calls this once it has issued its side-stream work. The main stream waits for that
  // work now, or, where the program lets the op's side work outlive it (Op::side_work_outlives),
  // at the end of the next op, so it overlaps that op; the memory plan keeps the op's tensors
  // alive until then.
  void end_side_work();
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
  void* workspace(int index = 0) const { return workspace_[index]; }
  size_t workspace_bytes(int index = 0) const { return workspace_bytes_[index]; }
  size_t workspace_total_bytes() const override;
  CudnnGraphs& graphs();
  int device_ordinal() const { return device_; }
  // The options in effect (environment overrides applied).
  const CudaOptions& options() const { return options_; }

 private:
  int device_ = 0;
  // The main and the side stream with their events and workspaces.
  cudaStream_t streams_[kStreams] = {};
  cudaEvent_t events_[kStreams] = {};
  void* workspace_[kStreams] = {};
  size_t workspace_bytes_[kStreams] = {}, requested_bytes_[kStreams] = {};
  cudaStream_t main_stream() const { return streams_[0]; }
  // Side work left running by an op (end_side_work): recorded in deferred_[slot_] by the current
  // op, waited for by the main stream when the next op ends (deferred_[slot_ ^ 1] by then).
  cudaEvent_t deferred_[2] = {};
  int slot_ = 0;
  bool may_defer_ = false, deferred_now_ = false, previous_pending_ = false;
  void join_previous();
  CudaOptions options_;
  std::shared_ptr<CudnnGraphs> graphs_;  // the process-wide cache of this device and graph options
  // The step's scalars on the device, written in stream order by a kernel whose argument they
  // are (step_scalars_cuda.h).
  StepScalars* device_scalars_ = nullptr;
  // Each captured graph, its instance, and its nodes that write the step's scalars (one per op
  // list it holds); replay() sets their argument. The graph is kept: its nodes name them.
  struct Captured {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::vector<cudaGraphNode_t> scalar_nodes;
  };
  std::vector<Captured> captured_;
  std::vector<cudaGraphNode_t> capture_scalar_nodes_;  // of the capture in progress
  void release(Captured& c);
  static constexpr int kStaging = 4;  // a step's batch and labels, and the next step's
  struct Staging {
    void* host = nullptr;    // pinned
    void* device = nullptr;  // where the copy stream puts the bytes
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;  // the copy stream's copy out of `host` has finished
    cudaEvent_t taken = nullptr;   // the main stream's copy out of `device` has finished
  };
  cudaStream_t copy_stream_ = nullptr;  // host-to-device copies of staged batches
  Staging staging_[kStaging];
  int next_staging_ = 0;
  // Stages `bytes` of `host_src` in the next staging buffer and makes the main stream wait for
  // their arrival; returns the buffer, whose device bytes the main stream's next work may read.
  // The caller records the buffer's `taken` event after that work.
  Staging& stage(const void* host_src, size_t bytes, const char* what);
  void* gather_ = nullptr;  // pinned, for copy_out_many
  // Data parallel: the stream the gradient averages run on (made at the first), and its events.
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t comm_events_[kStreams + 1] = {};  // each stream: ready for the average; comm: done
  bool averages_pending_ = false;
  void make_comm_stream();
  size_t gather_bytes_ = 0;
};

// The CUDA backend of an op call (a kiln::Error if the call runs on another backend).
CudaBackend& cuda_backend(Backend* backend, const std::string& where);

}  // namespace kiln::cuda

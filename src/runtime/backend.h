#pragma once
// Where a program's arena lives and how bytes move in and out of it. The CPU backend is plain
// host memory; the CUDA backend (src/runtime/cuda/) owns device memory, streams, the cuDNN
// handle and graph cache, and the op workspace.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/op_scratch.h"
#include "core/pixel_affine.h"
#include "kiln/device_pixels.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/data_parallel.h"
#include "kiln/executable.h"
#include "kiln/options.h"

namespace kiln {

// Per-channel normalization of uint8 pixels: value = pixel * scale[c] + bias[c].
struct PixelNormalization {
  static constexpr int kMaxChannels = 4;
  int channels = 0;
  float scale[kMaxChannels] = {}, bias[kMaxChannels] = {};
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // One zero-filled allocation for the whole arena, made once per executable.
  virtual std::byte* allocate(size_t bytes) = 0;
  virtual void release(std::byte* memory) = 0;
  virtual void copy_in(void* dst, const void* host_src, size_t bytes) = 0;
  // Zero bytes in device memory, in place: no host buffer, no copy.
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual void copy_out(void* host_dst, const void* src, size_t bytes) = 0;
  // Several copy_outs; a backend may issue them all before one wait.
  struct CopyOut {
    void* host_dst;
    const void* src;
    size_t bytes;
  };
  virtual void copy_out_many(const std::vector<CopyOut>& copies) {
    for (const CopyOut& c : copies) copy_out(c.host_dst, c.src, c.bytes);
  }
  // copy_in in stream order without waiting for it: `host_src` may be reused at once (the bytes
  // are staged), and the next op list sees them. The default waits, as copy_in does.
  virtual void copy_in_ordered(void* dst, const void* host_src, size_t bytes) { copy_in(dst, host_src, bytes); }
  // `count` uint8 values (HWC pixels of n.channels channels) written to the F32 tensor `dst` as
  // pixel * scale[c] + bias[c] (a multiply, then an add, each rounded: the loader's float
  // normalization, bit for bit), in stream order as copy_in_ordered: a quarter of the bytes
  // cross to the device, and the conversion runs there. The default converts on the host.
  virtual void normalize_in_ordered(float* dst, const uint8_t* pixels, int64_t count, const PixelNormalization& n) {
    std::vector<float> values(static_cast<size_t>(count));
    normalize_pixels_rounded(pixels, count, n.scale, n.bias, n.channels, values.data());
    copy_in_ordered(dst, values.data(), values.size() * sizeof(float));
  }
  // The same conversion from pixels already on the device (a GPU-decoded batch): the main stream
  // waits for them to be ready, converts, and hands the buffer back (DevicePixels::read_on).
  virtual void normalize_device_pixels_ordered(float* dst, DevicePixels& pixels, int64_t count,
                                               const PixelNormalization& n) {
    (void)dst, (void)pixels, (void)count, (void)n;
    fail("pixels decoded on the GPU need the CUDA backend; use --decode cpu with --device cpu");
  }
  // Ops ask for scratch memory for their work on stream `stream` while being prepared; each
  // stream's is allocated once afterwards, as large as its largest request.
  virtual void request_workspace(size_t bytes, int stream = 0) { (void)bytes, (void)stream; }
  virtual void finish_prepare() {}
  // What preparing has done so far that takes time, for the progress line ("" when nothing does).
  virtual std::string prepare_status() const { return ""; }
  // What the ops' scratch memory takes in all, beside the arena.
  virtual size_t workspace_total_bytes() const { return 0; }
  // The workspace as host memory the executable lends each op while it runs (core/op_scratch.h);
  // empty where the workspace is device memory the backend hands out itself (CUDA).
  virtual OpScratch op_scratch() const { return {}; }
  // Waits until all work issued so far has finished.
  virtual void synchronize() {}
  // Where ops read the step's scalars on the device (nullptr: no device copy, the CPU), and the
  // write of `s` there, issued in stream order before the step's ops (under capture: a node
  // whose value replay() sets for each launch).
  virtual const StepScalars* device_scalars() const { return nullptr; }
  virtual void stage_scalars(const StepScalars& s) { (void)s; }
  // One training step (or inference pass) as a CUDA Graph: `record` issues the step's work,
  // `replay` runs what was recorded. Backends without graphs run `record` every time.
  virtual bool can_capture() const { return false; }
  virtual void begin_capture() {}
  virtual void end_capture(int graph) { (void)graph; }
  virtual void abort_capture() {}  // after a failure between begin_capture and end_capture
  // Launches graph `graph` with `s` as the step's scalars (written by its scalar nodes).
  virtual void replay(int graph, const StepScalars& s) { (void)graph, (void)s; }
  // Makes this backend's device current for the calling thread before its ops run.
  virtual void activate() {}
  // Around each op of a list the executable runs: before_op names the op (whether it leaves work
  // running beside the next one: Op::side_work_outlives, compile/op_streams.h), after_op follows
  // it, after_ops ends the list with all of its work joined into stream order. The CPU runs ops
  // one by one.
  virtual void before_op(const Op& op) { (void)op; }
  virtual void after_op() {}
  virtual void after_ops() {}
  // Data parallel: `count` gradient values of `dtype` at `data` become their mean over the ranks of
  // `group`, once every op issued so far has written them, beside the ops issued after (in a
  // captured step too); join_rank_averages makes the work issued after it wait for every average
  // started. The CUDA backend's run on a stream of their own; the CPU's, in order, with a group of
  // the process's own (tests: ranks on threads); a backend without them refuses.
  virtual void average_over_ranks(ProcessGroup& group, void* data, size_t count, DType dtype) {
    (void)group, (void)data, (void)count, (void)dtype;
    fail("data-parallel training needs the CUDA backend; use --device cuda");
  }
  virtual void join_rank_averages() {}
  // `bytes` at `data` become rank `root`'s, in stream order (the state every rank starts from).
  virtual void broadcast_over_ranks(ProcessGroup& group, void* data, size_t bytes, int root) {
    (void)group, (void)data, (void)bytes, (void)root;
    fail("data-parallel training needs the CUDA backend; use --device cuda");
  }
};

// The CPU backend with the CPU settings of the program (CompileOptions::cpu): a nonzero thread
// count resizes the process's one pool (kiln::set_threads), so the last CPU executable made with a
// count sets it for every executable; 0 leaves the pool as it is. Throws kiln::Error when a
// setting is out of range (the rows of settings/cpu_settings.h).
std::unique_ptr<Backend> make_cpu_backend(const CpuOptions& options);
// GPU `index` (cudaSetDevice ordinal) with the CUDA settings of the program (CompileOptions::cuda;
// the KILN_* environment variables override them); throws kiln::Error when built without CUDA,
// when that GPU does not exist or when a setting is invalid.
std::unique_ptr<Backend> make_cuda_backend(int index, const CudaOptions& options);

}  // namespace kiln

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/cpu_kernels.h"
#include "core/op_scratch.h"
#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/memory_plan.h"
#include "kiln/threads.h"
#include "runtime/backend.h"
#include "runtime/op_call.h"
#include "settings/cpu_settings.h"

namespace kiln {
namespace {

class CpuBackend final : public Backend {
 public:
  // The pool is the process's, not the backend's: a count set here stays after the backend goes
  // (kiln/options.h, CpuOptions::threads).
  explicit CpuBackend(const CpuOptions& options) {
    check_cpu_options(options);
    if (options.threads > 0) set_threads(options.threads);
    if (options.kernels > 0) set_cpu_kernels(CpuKernels(options.kernels));
  }
  Device device() const override { return Device::CPU; }
  std::byte* allocate(size_t bytes) override {
    const size_t rounded = std::max<size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (!p) fail("cannot allocate the {} MiB arena of this program; use a smaller batch", bytes >> 20);
    std::memset(p, 0, rounded);
    return static_cast<std::byte*>(p);
  }
  void release(std::byte* memory) override { std::free(memory); }
  void copy_in(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void zero(void* dst, size_t bytes) override { std::memset(dst, 0, bytes); }
  void copy_out(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }

  // The ops' scratch (core/op_scratch.h): one buffer, allocated once the ops are prepared, lent to
  // each op while it runs (Executable::run_op). Ops run one at a time, so one serves them all.
  ~CpuBackend() override { std::free(workspace_); }
  void request_workspace(size_t bytes, int stream) override {
    (void)stream;  // the CPU runs ops one by one: one workspace
    requested_ = std::max(requested_, bytes);
  }
  void finish_prepare() override {
    if (requested_ == workspace_bytes_) return;
    std::free(workspace_);
    workspace_ = nullptr, workspace_bytes_ = 0;
    if (requested_ == 0) return;
    const size_t rounded = (requested_ + kAlignment - 1) / kAlignment * kAlignment;
    workspace_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
    if (!workspace_) fail("cannot allocate the {} MiB the CPU ops need as scratch; use a smaller batch", rounded >> 20);
    workspace_bytes_ = requested_;
  }
  size_t workspace_total_bytes() const override { return workspace_bytes_; }
  // Data parallel on the CPU runs only with a group of the process's own (the tests' ranks on
  // threads): kiln's launcher joins ranks over NCCL, on GPUs. In program order, as every op here.
  void average_over_ranks(ProcessGroup& group, void* data, size_t count, DType dtype) override {
    group.average(data, count, dtype, nullptr);
  }
  void broadcast_over_ranks(ProcessGroup& group, void* data, size_t bytes, int root) override {
    group.broadcast(data, bytes, root, nullptr);
  }
  OpScratch op_scratch() const override { return {workspace_, workspace_bytes_}; }

 private:
  std::byte* workspace_ = nullptr;
  size_t workspace_bytes_ = 0, requested_ = 0;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuOptions& options) { return std::make_unique<CpuBackend>(options); }

}  // namespace kiln

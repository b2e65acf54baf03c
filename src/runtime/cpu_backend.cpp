#include <cstdlib>
#include <cstring>

#include "kiln/device.h"
#include "kiln/error.h"
#include "kiln/memory_plan.h"
#include "runtime/backend.h"
#include "runtime/op_call.h"

namespace kiln {
namespace {

class CpuBackend final : public Backend {
 public:
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
  void copy_out(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace kiln

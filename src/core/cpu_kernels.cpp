#include "core/cpu_kernels.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "kiln/error.h"

namespace kiln {
namespace {

void need_onednn(const char* who) {
  if (!onednn_built())
    fail("{} asks for oneDNN's CPU kernels, but this build of kiln has no oneDNN; run scripts/setup.sh "
         "(it fetches oneDNN 3 into third_party/onednn) and rebuild, or ask for the reference kernels (reference, 2)",
         who);
}

CpuKernels from_environment() {
  const char* text = std::getenv("KILN_CPU_KERNELS");
  if (!text || !*text) return onednn_built() ? CpuKernels::OneDnn : CpuKernels::Reference;
  const std::string v = text;
  if (v == "reference" || v == "2") return CpuKernels::Reference;
  if (v == "onednn" || v == "1" || v == "onednn-bf16" || v == "3") {
    need_onednn("KILN_CPU_KERNELS");
    return v == "onednn" || v == "1" ? CpuKernels::OneDnn : CpuKernels::OneDnnBf16;
  }
  fail("KILN_CPU_KERNELS='{}' is not a choice: use onednn (or 1), reference (or 2) or onednn-bf16 (or 3), or "
       "unset it",
       v);
}

// 0 until the first cpu_kernels() or set_cpu_kernels().
std::atomic<int> chosen{0};

}  // namespace

bool onednn_built() {
#if KILN_WITH_ONEDNN
  return true;
#else
  return false;
#endif
}

CpuKernels cpu_kernels() {
  int v = chosen.load(std::memory_order_relaxed);
  if (v == 0) {
    int expected = 0;
    chosen.compare_exchange_strong(expected, int(from_environment()));
    v = chosen.load(std::memory_order_relaxed);
  }
  return CpuKernels(v);
}

bool uses_onednn(CpuKernels kernels) { return kernels == CpuKernels::OneDnn || kernels == CpuKernels::OneDnnBf16; }

void set_cpu_kernels(CpuKernels kernels) {
  if (kernels != CpuKernels::OneDnn && kernels != CpuKernels::Reference && kernels != CpuKernels::OneDnnBf16)
    fail("CPU kernels {} is not a choice: use 1 (onednn), 2 (reference) or 3 (onednn-bf16)", int(kernels));
  if (uses_onednn(kernels))
    need_onednn(kernels == CpuKernels::OneDnn ? "CompileOptions::cpu.kernels = 1" : "CompileOptions::cpu.kernels = 3");
  chosen.store(int(kernels), std::memory_order_relaxed);
}

const char* cpu_kernels_name(CpuKernels kernels) {
  switch (kernels) {
    case CpuKernels::OneDnn: return "onednn";
    case CpuKernels::OneDnnBf16: return "onednn-bf16";
    default: return "reference";
  }
}

}  // namespace kiln

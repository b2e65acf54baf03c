#include "ir/cpu_option_table.h"

#include "kiln/error.h"
#include "kiln/threads.h"

namespace kiln {

const std::vector<CpuOptionField>& cpu_option_fields() {
  static const std::vector<CpuOptionField> fields = {
      {"threads", "--threads", "KILN_THREADS", 1, max_threads, "threads of the CPU kernels (one pool per process)",
       "leave the pool as it is: KILN_THREADS when set, else the cores this process may use", &CpuOptions::threads},
      {"kernels", "--cpu-kernels", "KILN_CPU_KERNELS", 1, [] { return 3; },
       "which kernels run the CPU convolutions: 1 (onednn) oneDNN's, 2 (reference) kiln's own im2col + GEMM, "
       "3 (onednn-bf16) oneDNN's with bf16 products on CPUs with bf16 instructions",
       "leave them as they are: KILN_CPU_KERNELS when set, else oneDNN where kiln was built with it",
       &CpuOptions::kernels},
  };
  return fields;
}

void check_cpu_options(const CpuOptions& o) {
  for (const CpuOptionField& f : cpu_option_fields()) {
    const int v = o.*f.field, hi = f.hi();
    if (v != 0 && (v < f.lo || v > hi))
      fail("CompileOptions::cpu.{} = {} is not valid: it takes {}, from {} to {}, or 0 to {} ({} in kiln's CLI, {} "
           "when 0)",
           f.member, v, f.help, f.lo, hi, f.zero, f.flag, f.env);
  }
}

}  // namespace kiln

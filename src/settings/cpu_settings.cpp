#include "settings/cpu_settings.h"

#include "kiln/error.h"
#include "kiln/threads.h"

namespace kiln {

const std::vector<Setting>& cpu_settings() {
  using C = CpuOptions;
  static const std::vector<Setting> rows = {
      count_setting<C>({.key = "threads",
                        .flag = "--threads",
                        .env = "KILN_THREADS",
                        .help = "threads of the CPU kernels (one pool per process)",
                        .member = "CompileOptions::cpu.threads",
                        .zero = "leave the pool as it is: KILN_THREADS when set, else the cores this process may use"},
                       &C::threads, {1, double(max_threads())}),
      count_setting<C>({.key = "kernels",
                        .flag = "--cpu-kernels",
                        .env = "KILN_CPU_KERNELS",
                        .help = "which kernels run the CPU convolutions: 1 (onednn) oneDNN's, 2 (reference) kiln's "
                                "own im2col + GEMM, 3 (onednn-bf16) oneDNN's with bf16 products on CPUs with bf16 "
                                "instructions",
                        .member = "CompileOptions::cpu.kernels",
                        .zero = "leave them as they are: KILN_CPU_KERNELS when set, else oneDNN where kiln was built "
                                "with it"},
                       &C::kernels, {1, 3}),
  };
  return rows;
}

const Setting& cpu_setting(const char* key) {
  const Setting* row = find_setting(cpu_settings(), key);
  if (!row) fail("internal: no CPU setting '{}'", key);
  return *row;
}

void check_cpu_options(const CpuOptions& o) {
  for (const Setting& row : cpu_settings()) {
    const int v = setting_number(row, &o);
    if (v != 0 && !row.range.contains(v))
      fail("{} = {} is not valid: it takes {}, from {} to {}, or 0 to {} ({} in kiln's CLI, {} when 0)",
           row.info.member, v, row.info.help, row.range.lo, row.range.hi, row.info.zero, row.info.flag,
           row.info.env);
  }
}

}  // namespace kiln

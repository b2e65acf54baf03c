#pragma once
// Which kernels run the CPU backend's convolutions: oneDNN's (where the build found it) or kiln's
// own im2col + GEMM kernels, kept as the reference every oneDNN op is tested against. One choice
// per process, like the thread pool (kiln/threads.h): CompileOptions::cpu.kernels sets it when a
// CPU Executable is made; until then KILN_CPU_KERNELS, else oneDNN where built.
namespace kiln {

enum class CpuKernels { OneDnn = 1, Reference = 2 };

// Whether this build has oneDNN (cmake/onednn.cmake).
bool onednn_built();

// The kernels in use. KILN_CPU_KERNELS (onednn, reference, 1 or 2) decides until set_cpu_kernels
// is called; anything else in it is a kiln::Error naming the variable.
CpuKernels cpu_kernels();

// A kiln::Error naming the fix when asked for oneDNN in a build without it.
void set_cpu_kernels(CpuKernels kernels);

const char* cpu_kernels_name(CpuKernels kernels);

}  // namespace kiln

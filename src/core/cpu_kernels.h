#pragma once
// Which kernels run the CPU backend's convolutions: oneDNN's (where the build found it), in fp32
// or with bf16 products (oneDNN's bf16 math mode, on CPUs with bf16 instructions), or kiln's own
// im2col + GEMM kernels, kept as the reference every oneDNN op is tested against. One choice
// per process, like the thread pool (kiln/threads.h): CompileOptions::cpu.kernels sets it when a
// CPU Executable is made; until then KILN_CPU_KERNELS, else oneDNN where built.
namespace kiln {

// OneDnnBf16: tensors stay fp32; each convolution rounds its two inputs to bf16 and adds their
// products in fp32, as PyTorch's torch.backends.mkldnn.conv.fp32_precision = "bf16". Preparing a
// convolution under it on a CPU without bf16 instructions is a kiln::Error naming the fix.
enum class CpuKernels { OneDnn = 1, Reference = 2, OneDnnBf16 = 3 };

// Whether this build has oneDNN (cmake/onednn.cmake).
bool onednn_built();

// Whether the convolutions run on oneDNN (OneDnn or OneDnnBf16).
bool uses_onednn(CpuKernels kernels);

// The kernels in use. KILN_CPU_KERNELS (onednn, reference, onednn-bf16, 1, 2 or 3) decides until set_cpu_kernels
// is called; anything else in it is a kiln::Error naming the variable.
CpuKernels cpu_kernels();

// A kiln::Error naming the fix when asked for oneDNN in a build without it.
void set_cpu_kernels(CpuKernels kernels);

const char* cpu_kernels_name(CpuKernels kernels);

}  // namespace kiln

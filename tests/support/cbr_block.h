#pragma once
// One Conv -> BN -> ReLU block compiled without a loss, run on any device and precision with the
// same inputs: the GPU tests compare its fused and unfused forms, the CPU reference and PyTorch.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/executable.h"
#include "support/cpu_test_util.h"
#include "support/half_host.h"

namespace kiln::testing {

struct BlockShape {
  int n, c, hw, k, kernel, stride;
  int pad() const { return kernel / 2; }
  std::string str() const {
    return "N" + std::to_string(n) + " C" + std::to_string(c) + " " + std::to_string(hw) + "x" + std::to_string(hw) +
           " K" + std::to_string(k) + " " + std::to_string(kernel) + "x" + std::to_string(kernel) + " s" +
           std::to_string(stride);
  }
};

inline Blueprint conv_bn_relu_block(const BlockShape& s) {
  Blueprint m("block");
  m.input(s.hw, s.hw, s.c).conv(s.k, s.kernel, s.stride, s.pad(), false, "conv").bn("bn").relu("relu");
  return m;
}

// `cuda`: the CUDA backend's settings (on the GPU; the KILN_* variables still override them).
inline CompileOptions block_options(const BlockShape& s, Device device, Precision precision, bool fuse,
                                    bool input_grad, const CudaOptions& cuda = {}) {
  CompileOptions o;
  o.device = device, o.precision = precision, o.batch = s.n, o.fuse_cbr = fuse;
  o.loss = false, o.input_grad = input_grad;
  o.cuda = cuda;
  return o;
}

// A tensor's bytes as stored, whatever its dtype (for bit-for-bit comparisons).
inline std::vector<std::byte> read_tensor_bytes(Executable& exe, int id) {
  std::vector<std::byte> bytes(exe.program().tensors[size_t(id)].bytes());
  exe.read(id, bytes.data(), bytes.size());
  return bytes;
}

// Reads any float tensor (fp32/fp16/bf16) as fp32 values.
inline std::vector<float> read_floats(Executable& exe, const std::string& name) {
  const int id = exe.id(name);
  return decode(exe.program().tensors[size_t(id)].dtype, read_tensor_bytes(exe, id));
}

inline void write_floats(Executable& exe, int id, const std::vector<float>& values) {
  const std::vector<std::byte> bytes = encode(exe.program().tensors[id].dtype, values);
  exe.write(id, bytes.data(), bytes.size());
}

inline DType activation_dtype(Precision p) {
  return p == Precision::FP16 ? DType::F16 : p == Precision::BF16 ? DType::BF16 : DType::F32;
}

// Relative L2 bounds against an fp32 reference: fp32 without TF32 agrees to rounding; fp16 and
// bf16 activations/weights carry 2^-11 and 2^-8 relative rounding per element.
inline double tolerance(Precision p) {
  return p == Precision::FP16 ? 5e-3 : p == Precision::BF16 ? 3e-2 : 1e-4;
}

}  // namespace kiln::testing

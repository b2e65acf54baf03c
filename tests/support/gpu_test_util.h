#pragma once
// Helpers shared by the GPU tests (src/ops/*/*_gpu_test.cpp, tests/gpu/*.cpp): skipping without a
// GPU (or without PyTorch), device buffers and tensors with host-side encoding through the one
// converter (support/half_host.h), poisoning, and per-channel references of the BN/CBR kernels.
// Host-side values and comparisons (random_values, expect_close, ...) are support/cpu_test_util.h's.
// CUDA failures throw std::runtime_error, which gtest reports with the message.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kiln/checkpoint.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "support/cpu_test_util.h"
#include "support/half_host.h"

namespace kiln::gpu_test {

using testing::expect_close;
using testing::random_values;
using testing::round_to;
using testing::rounded;

inline bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// First statement of every GPU test.
#define KILN_REQUIRE_GPU()                                                     \
  do {                                                                         \
    if (!::kiln::gpu_test::cuda_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// The Python interpreter of the PyTorch references: KILN_TORCH_PYTHON when set (e.g. a venv with a
// CPU build of torch on a machine without a GPU), else python3.
inline std::string torch_python() {
  const char* env = std::getenv("KILN_TORCH_PYTHON");
  return env && *env ? env : "python3";
}

// A GPU, and torch_python() with torch (CUDA) and safetensors: what the comparisons with PyTorch need.
// Asked once per process (importing torch takes seconds).
inline bool torch_available() {
  static const bool available =
      cuda_available() &&
      std::system((torch_python() + " -c 'import torch, safetensors; assert torch.cuda.is_available()' >/dev/null "
                                    "2>&1").c_str()) == 0;
  return available;
}

// torch_python() with torch, torchvision and safetensors, CUDA or not: what the CPU halves of the
// comparisons need (they run the reference on PyTorch's CPU). Asked once per process.
inline bool torch_cpu_available() {
  static const bool available =
      std::system((torch_python() + " -c 'import torch, torchvision, safetensors' >/dev/null 2>&1").c_str()) == 0;
  return available;
}

// Why a comparison with PyTorch on `device` cannot run here ("" when it can), for GTEST_SKIP: a
// CUDA comparison needs a GPU, torch with CUDA and torchvision; a CPU one torch and torchvision.
inline std::string torch_missing(Device device) {
  if (device == Device::CUDA) {
    if (!torch_available() || !torch_cpu_available())  // the latter: torchvision
      return "needs a GPU and " + torch_python() + " with torch (CUDA), torchvision, safetensors";
  } else if (!torch_cpu_available()) {
    return "needs " + torch_python() +
           " with torch, torchvision and safetensors (KILN_TORCH_PYTHON names another interpreter)";
  }
  return "";
}

#ifdef KILN_SOURCE_DIR
// The repository root: KILN_SOURCE_DIR in the environment (binaries built on another machine),
// else where the tests were compiled.
inline std::string source_dir() {
  const char* env = std::getenv("KILN_SOURCE_DIR");
  return env && *env ? env : KILN_SOURCE_DIR;
}
#endif

// Exchanging tensors with the PyTorch reference scripts (bench/torch_*_reference.py) through
// safetensors files: an F32 tensor of `v` (one dimension of v.size() unless `shape` is given), and
// back the F32 tensor `name` of a file they wrote (empty, and a failure, when it lacks one).
inline NamedTensor f32_tensor(const std::string& name, const std::vector<float>& v, Shape shape = {}) {
  if (shape.empty()) shape = {static_cast<int64_t>(v.size())};
  NamedTensor t{name, DType::F32, std::move(shape), std::vector<std::byte>(v.size() * 4)};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}
inline std::vector<float> f32_values(const SafetensorsFile& f, const std::string& name) {
  const NamedTensor* t = f.find(name);
  if (!t || t->dtype != DType::F32) {
    ADD_FAILURE() << "PyTorch output lacks fp32 tensor " << name;
    return {};
  }
  std::vector<float> v(t->data.size() / 4);
  std::memcpy(v.data(), t->data.data(), t->data.size());
  return v;
}

#ifdef KILN_SOURCE_DIR
// Runs a PyTorch reference script, `<torch_python()> bench/<script> IN OUT`: writes `inputs` and `metadata`
// to IN, <temp>/<folder>/<stem>.in.safetensors (name the stem by precision and case: precisions
// may run as parallel test processes), and returns what the script wrote to OUT. A stale OUT is
// removed first; a script that fails is a kiln::Error naming its command.
inline SafetensorsFile torch_reference(const std::string& script, const std::string& folder, const std::string& stem,
                                       const std::vector<NamedTensor>& inputs,
                                       const std::map<std::string, std::string>& metadata) {
  const auto dir = std::filesystem::temp_directory_path() / folder;
  std::filesystem::create_directories(dir);
  const std::string in = (dir / (stem + ".in.safetensors")).string(), out = (dir / (stem + ".out.safetensors")).string();
  save_safetensors(in, inputs, metadata);
  std::filesystem::remove(out);  // never read a stale answer
  const std::string cmd = torch_python() + " " + source_dir() + "/bench/" + script + " " + in + " " + out;
  if (std::system(cmd.c_str()) != 0) fail("the PyTorch reference failed: {}", cmd);
  return load_safetensors(out);
}
#endif

inline void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// Waits for all launched work and surfaces asynchronous kernel faults here, not later.
inline void sync() {
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the kernels under test");
  cuda_check(cudaGetLastError(), "kernel error");
}

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) cuda_check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

  void upload(const void* host, size_t bytes, size_t offset = 0) {
    cuda_check(cudaMemcpy(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice),
               "cudaMemcpy to device");
  }
  std::vector<uint8_t> download(size_t bytes, size_t offset = 0) const {
    std::vector<uint8_t> out(bytes);
    cuda_check(
        cudaMemcpy(out.data(), static_cast<char*>(ptr_) + offset, bytes, cudaMemcpyDeviceToHost),
        "cudaMemcpy to host");
    return out;
  }
  // 0xFF makes every float element NaN, so an element a kernel forgot to write shows up.
  // Waited for: cudaMemset runs on the legacy default stream, which kiln's non-blocking streams
  // do not wait for, so an unfinished fill could land after the kernel under test.
  void poison(uint8_t byte = 0xFF) {
    cuda_check(cudaMemset(ptr_, byte, bytes_), "cudaMemset (poison)");
    cuda_check(cudaDeviceSynchronize(), "cudaMemset (poison)");
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A device tensor of `values` (rounded to dtype) starting `offset_elems` elements into its
// buffer: offsets of 1 defeat 16-byte alignment and exercise the narrow paths.
struct DeviceTensor {
  DType dtype = DType::F32;
  size_t n = 0, offset = 0;
  DeviceBuffer buf;

  DeviceTensor(DType d, size_t count, size_t offset_elems = 0)
      : dtype(d), n(count), offset(offset_elems), buf((count + offset_elems) * dtype_size(d) + 1) {}
  DeviceTensor(DType d, const std::vector<double>& values, size_t offset_elems = 0)
      : DeviceTensor(d, values.size(), offset_elems) {
    set(values);
  }
  // An output: every byte 0xFF (NaN in every float format), so an element a kernel never
  // writes shows up as NaN.
  static DeviceTensor poisoned(DType d, size_t count, size_t offset_elems = 0) {
    DeviceTensor t(d, count, offset_elems);
    t.poison();
    return t;
  }
  void* ptr() const { return static_cast<char*>(buf.get()) + offset * dtype_size(dtype); }
  float* f32() const { return static_cast<float*>(ptr()); }
  void set(const std::vector<double>& values) {
    const std::vector<std::byte> bytes = testing::encode(dtype, values);
    buf.upload(bytes.data(), bytes.size(), offset * dtype_size(dtype));
  }
  std::vector<double> get() const {
    const std::vector<uint8_t> bytes = buf.download(n * dtype_size(dtype), offset * dtype_size(dtype));
    return testing::decode<double>(dtype, bytes.data(), bytes.size());
  }
  void poison(uint8_t byte = 0xFF) { buf.poison(byte); }
};

// A byte buffer (masks) starting `offset` bytes in.
struct DeviceBytes {
  size_t n = 0, offset = 0;
  DeviceBuffer buf;
  explicit DeviceBytes(size_t count, size_t offset_bytes = 0)
      : n(count), offset(offset_bytes), buf(count + offset_bytes + 1) {}
  DeviceBytes(const std::vector<uint8_t>& bytes, size_t offset_bytes = 0)
      : DeviceBytes(bytes.size(), offset_bytes) {
    if (!bytes.empty()) buf.upload(bytes.data(), bytes.size(), offset);
  }
  uint8_t* ptr() const { return static_cast<uint8_t*>(buf.get()) + offset; }
  std::vector<uint8_t> get() const { return buf.download(n, offset); }
  void poison(uint8_t byte) { buf.poison(byte); }
};

// --- Comparisons ---

inline const char* name(DType d) { return dtype_name(d); }

// Relative L2 tolerance for results stored in `dtype` (rounding of the output dominates).
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::F16: return 2e-3;
    case DType::BF16: return 1e-2;
    default: return 1e-5;
  }
}

// Expected ReLU bits: a mismatch is allowed only where the pre-activation is within
// `slack` of 0 (fp32 rounding can flip its sign there).
inline void expect_mask_equal(const std::string& what, const std::vector<uint8_t>& got_bits,
                              const std::vector<double>& pre, const std::vector<double>& slack) {
  const size_t n = pre.size();
  ASSERT_EQ(got_bits.size(), (n + 7) / 8) << what << ": mask byte count";
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool got = (got_bits[i / 8] >> (i % 8)) & 1, want = pre[i] > 0;
    if (got != want && std::abs(pre[i]) > slack[i]) {
      if (bad++ == 0) first_bad = i;
    }
  }
  for (size_t i = n; i < got_bits.size() * 8; ++i)  // padding bits must be 0
    if ((got_bits[i / 8] >> (i % 8)) & 1) {
      ADD_FAILURE() << what << ": padding bit " << i << " past " << n << " elements is set";
      break;
    }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << n
                     << " mask bits are wrong, first at element " << first_bad
                     << " (pre-activation " << (bad ? pre[first_bad] : 0.0) << ")";
}

// Expected byte mask (1 = pass), same allowance as expect_mask_equal.
inline void expect_bytemask_equal(const std::string& what, const std::vector<uint8_t>& got,
                                  const std::vector<double>& pre,
                                  const std::vector<double>& slack) {
  ASSERT_EQ(got.size(), pre.size()) << what << ": mask size";
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < pre.size(); ++i) {
    const bool ok = got[i] == uint8_t(pre[i] > 0) || (got[i] <= 1 && std::abs(pre[i]) <= slack[i]);
    if (!ok && bad++ == 0) first_bad = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << pre.size()
                     << " mask bytes are wrong, first at element " << first_bad << " (got "
                     << (bad ? int(got[first_bad]) : 0) << ", pre-activation "
                     << (bad ? pre[first_bad] : 0.0) << ")";
}

// Random bytes (e.g. a bit mask with about half the bits set).
inline std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> b(n);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng() & 0xff);
  return b;
}

inline bool bit(const std::vector<uint8_t>& bits, size_t i) { return (bits[i / 8] >> (i % 8)) & 1; }

inline std::string shape_name(int64_t m, int64_t c) {
  std::ostringstream s;
  s << "m=" << m << " c=" << c;
  return s.str();
}

// One (m rows x c channels) case of the per-channel kernels.
struct TileCase {
  int64_t m, c;
  size_t offset = 0;  // elements: 1 misaligns every activation pointer
};

inline std::string label(DType dt, const TileCase& k) {
  return std::string(name(dt)) + " " + shape_name(k.m, k.c) + " offset=" + std::to_string(k.offset);
}

// Float64 reference of the per-channel apply (bn_apply, cbr_apply_relu_bitmask): pre = x * scale
// + shift, want = relu ? max(pre, 0) : pre, and slack = how close to 0 a pre-activation may be
// for its mask bit to go either way under fp32 rounding.
struct ApplyReference {
  std::vector<double> pre, slack, want;
};

inline ApplyReference apply_reference(const std::vector<double>& x, const std::vector<double>& scale,
                                      const std::vector<double>& shift, int64_t c, bool relu) {
  const size_t n = x.size();
  ApplyReference r{std::vector<double>(n), std::vector<double>(n), std::vector<double>(n)};
  for (size_t i = 0; i < n; ++i) {
    r.pre[i] = x[i] * scale[i % c] + shift[i % c];
    r.slack[i] = 1e-5 * (std::abs(x[i] * scale[i % c]) + std::abs(shift[i % c]));
    r.want[i] = relu ? (r.pre[i] > 0 ? r.pre[i] : 0.0) : r.pre[i];
  }
  return r;
}

// Per-channel batch mean and 1/sqrt(var + 1e-5) (biased variance) of m x c values in float64,
// rounded to fp32 as the kernels get them.
inline void reference_stats(const std::vector<double>& x, int64_t m, int64_t c, std::vector<double>& mean,
                            std::vector<double>& inv_std) {
  mean.assign(c, 0.0), inv_std.assign(c, 0.0);
  for (int64_t i = 0; i < m * c; ++i) mean[i % c] += x[i];
  for (auto& v : mean) v /= double(m);
  std::vector<double> var(c, 0.0);
  for (int64_t i = 0; i < m * c; ++i) var[i % c] += (x[i] - mean[i % c]) * (x[i] - mean[i % c]);
  for (int64_t ch = 0; ch < c; ++ch) {
    inv_std[ch] = static_cast<float>(1.0 / std::sqrt(var[ch] / double(m) + 1e-5));
    mean[ch] = static_cast<float>(mean[ch]);
  }
}

// Float64 reference of BN backward behind an optional ReLU bit mask (bn_backward_reduce +
// bn_backward_apply, cbr_backward): g = dy where the mask bit is set (everywhere without a mask),
// xhat = (x - mean) * inv_std; sums in float64; dx from the sums rounded to fp32, as the device's
// apply pass reads them back.
struct BnBackwardReference {
  std::vector<double> sum_dy, sum_dy_xhat, dx;
};

inline BnBackwardReference bn_backward_reference(const std::vector<double>& dy, const std::vector<uint8_t>* mask,
                                                 const std::vector<double>& x, const std::vector<double>& gamma,
                                                 const std::vector<double>& mean,
                                                 const std::vector<double>& inv_std, int64_t m, int64_t c) {
  const int64_t n = m * c;
  BnBackwardReference r{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0), std::vector<double>(n)};
  std::vector<double> g(n), xhat(n);
  for (int64_t i = 0; i < n; ++i) {
    g[i] = mask && !bit(*mask, i) ? 0.0 : dy[i];
    xhat[i] = (x[i] - mean[i % c]) * inv_std[i % c];
    r.sum_dy[i % c] += g[i];
    r.sum_dy_xhat[i % c] += g[i] * xhat[i];
  }
  const std::vector<double> sdy32 = rounded(DType::F32, r.sum_dy),
                             sdyx32 = rounded(DType::F32, r.sum_dy_xhat);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ch = i % c;
    r.dx[i] = gamma[ch] * inv_std[ch] * (g[i] - sdy32[ch] / m - xhat[i] * sdyx32[ch] / m);
  }
  return r;
}

}  // namespace kiln::gpu_test

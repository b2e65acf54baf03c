// Times kiln's convolution alone, unfused Conv+BN+ReLU and the fused CBR on the GPU, forward,
// backward and forward+backward (dX included, as for a layer inside a network), for the shapes given, and
// prints one JSON object per (shape, variant) line. bench/torch_cbr_bench.py measures PyTorch on
// the same shapes; bench/report_cbr.py joins both into a table and a results file.
//
// usage: kiln_cbr_bench [--precision fp16] [--warmup 5] [--iters 20] [--variants conv,cbr,...]
//                       [N,C,HW,K,kernel,stride ...]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "kiln/error.h"
#include "kiln/executable.h"

namespace {

struct Shape6 {
  int n, c, hw, k, kernel, stride;
};

const Shape6 kDefaultShapes[] = {{256, 64, 224, 64, 3, 1},  {256, 128, 112, 128, 3, 1}, {256, 256, 56, 256, 3, 1},
                                 {256, 512, 28, 512, 3, 1}, {256, 64, 56, 64, 3, 1},    {256, 64, 56, 256, 1, 1},
                                 {256, 256, 56, 64, 1, 1},  {256, 256, 14, 256, 3, 1}};

kiln::Blueprint block(const Shape6& s, bool conv_only) {
  kiln::Blueprint m("bench");
  m.input(s.hw, s.hw, s.c).conv(s.k, s.kernel, s.stride, s.kernel / 2, false, "conv");
  if (!conv_only) m.bn("bn").relu("relu");
  return m;
}

// Fills a tensor with a tiled block of normal values (never zeros), rounded by the device copy.
void fill(kiln::Executable& exe, int id, std::mt19937& rng) {
  const kiln::TensorSpec& t = exe.program().tensors[id];
  std::vector<std::byte> block(size_t(1) << 22);
  std::normal_distribution<float> dist(0.f, 1.f);
  if (t.dtype == kiln::DType::F32) {
    for (size_t i = 0; i + 4 <= block.size(); i += 4) {
      const float v = dist(rng);
      std::memcpy(&block[i], &v, 4);
    }
  } else {  // fp16/bf16: random bit patterns of values in about [-2, 2]
    for (size_t i = 0; i + 2 <= block.size(); i += 2) {
      const float v = dist(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t h = t.dtype == kiln::DType::BF16 ? uint16_t(bits >> 16)
                                                       : uint16_t(0x3800 + (bits & 0x7ff) + ((bits >> 31) << 15));
      std::memcpy(&block[i], &h, 2);
    }
  }
  std::vector<std::byte> all(t.bytes());
  for (size_t at = 0; at < all.size(); at += block.size())
    std::memcpy(&all[at], block.data(), std::min(block.size(), all.size() - at));
  exe.write(id, all.data(), all.size());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds per call of `body`, median over `iters` groups of 3 calls after `warmup` calls.
template <class F>
double time_ms(kiln::Executable& exe, int warmup, int iters, F&& body) {
  for (int i = 0; i < warmup; ++i) body();
  exe.synchronize();
  std::vector<double> samples;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < 3; ++r) body();
    exe.synchronize();
    samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 3);
  }
  return median(samples);
}

// Device-to-device copy bandwidth (read + write bytes over time), the ceiling for the memory-bound
// stages: median of 10 copies of 1 GiB.
double copy_tb_per_s() {
  const size_t bytes = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) return 0;
  cudaMemset(a, 1, bytes);
  cudaEvent_t start, end;
  cudaEventCreate(&start), cudaEventCreate(&end);
  std::vector<double> ms;
  for (int i = 0; i < 13; ++i) {
    cudaEventRecord(start);
    cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(end);
    cudaEventSynchronize(end);
    float t = 0;
    cudaEventElapsedTime(&t, start, end);
    if (i >= 3) ms.push_back(t);
  }
  cudaEventDestroy(start), cudaEventDestroy(end);
  cudaFree(a), cudaFree(b);
  return 2.0 * double(bytes) / (median(ms) * 1e-3) / 1e12;
}

}  // namespace

int main(int argc, char** argv) {
  std::string precision = "fp16";
  int warmup = 5, iters = 20;
  std::string variants;  // ",conv,cbr," from --variants conv,cbr; empty: all
  std::vector<Shape6> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--precision" && i + 1 < argc) precision = argv[++i];
    else if (a == "--warmup" && i + 1 < argc) warmup = std::stoi(argv[++i]);
    else if (a == "--iters" && i + 1 < argc) iters = std::stoi(argv[++i]);
    else if (a == "--variants" && i + 1 < argc) variants = "," + std::string(argv[++i]) + ",";
    else {
      Shape6 s{};
      if (std::sscanf(a.c_str(), "%d,%d,%d,%d,%d,%d", &s.n, &s.c, &s.hw, &s.k, &s.kernel, &s.stride) != 6) {
        std::fprintf(stderr, "bad shape '%s': expected N,C,HW,K,kernel,stride\n", a.c_str());
        return 2;
      }
      shapes.push_back(s);
    }
  }
  if (shapes.empty()) shapes.assign(std::begin(kDefaultShapes), std::end(kDefaultShapes));
  try {
    std::printf("{\"kind\": \"ceiling\", \"impl\": \"kiln\", \"copy_tb_s\": %.3f}\n", copy_tb_per_s());
    for (const Shape6& s : shapes) {
      // The cbr_slices* variants pipeline the backward over batch slices (KILN_PIPELINE_CHUNKS)
      // and the *_1stream ones run wgrad after dgrad on one stream (KILN_SIDE_STREAM=0), so that
      // the defaults (no slicing, wgrad beside dgrad) can be checked against each alternative;
      // they are timed backward and forward+backward only (their forward is the default's).
      struct Variant {
        const char* name;
        bool conv_only, fuse;
        const char* slices;
        const char* side_stream;
      };
      for (Variant v : {Variant{"conv", true, false, "1", "1"}, Variant{"conv_1stream", true, false, "1", "0"},
                        Variant{"unfused", false, false, "1", "1"}, Variant{"cbr", false, true, "1", "1"},
                        Variant{"cbr_1stream", false, true, "1", "0"}, Variant{"cbr_slices2", false, true, "2", "1"},
                        Variant{"cbr_slices4", false, true, "4", "1"}}) {
        if (!variants.empty() && variants.find("," + std::string(v.name) + ",") == std::string::npos) continue;
        // Both are read when the executable's backend is made.
        setenv("KILN_PIPELINE_CHUNKS", v.slices, 1);
        setenv("KILN_SIDE_STREAM", v.side_stream, 1);
        kiln::CompileOptions o;
        o.device = kiln::Device::CUDA;
        o.precision = kiln::parse_precision(precision);
        o.batch = s.n, o.fuse_cbr = v.fuse, o.loss = false, o.input_grad = true;
        kiln::Executable exe(kiln::compile(block(s, v.conv_only), o), 1);
        std::mt19937 rng(7);
        fill(exe, exe.program().input, rng);
        fill(exe, exe.program().output_grad, rng);
        const kiln::StepScalars step{0.f, 0, 1};
        const bool forced = std::strchr(v.name, '_') != nullptr;
        const double fwd = forced ? 0.0 : time_ms(exe, warmup, iters, [&] { exe.run_forward(step); });
        const double fwd_bwd = time_ms(exe, warmup, iters, [&] {
          exe.run_forward(step);
          exe.run_backward(step);
        });
        // The backward alone, again and again on the last forward's saved tensors: splits the
        // cost between the two halves.
        const double bwd = time_ms(exe, warmup, iters, [&] { exe.run_backward(step); });
        char fwd_text[32] = "null";
        if (!forced) std::snprintf(fwd_text, sizeof fwd_text, "%.4f", fwd);
        std::printf("{\"kind\": \"block\", \"impl\": \"kiln\", \"variant\": \"%s\", \"precision\": \"%s\", "
                    "\"shape\": [%d, %d, %d, %d, %d, %d], \"fwd_ms\": %s, \"bwd_ms\": %.4f, \"fwd_bwd_ms\": %.4f}\n",
                    v.name, precision.c_str(), s.n, s.c, s.hw, s.k, s.kernel, s.stride, fwd_text, bwd, fwd_bwd);
        std::fflush(stdout);
      }
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln_cbr_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

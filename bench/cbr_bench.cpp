// Times kiln's convolution alone, unfused Conv+BN+ReLU and the fused CBR on the GPU, forward,
// backward and forward+backward (dX included, as for a layer inside a network), for the shapes given, and
// prints one JSON object per (shape, variant) line. bench/torch_cbr_bench.py measures PyTorch on
// the same shapes; bench/report_cbr.py joins both into a table and a results file.
//
// The variants of one shape are timed interleaved (see time_interleaved_ms).
//
// usage: kiln_cbr_bench [--precision fp16] [--warmup 5] [--iters 30] [--variants conv,cbr,...]
//                       [N,C,HW,K,kernel,stride ...]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
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

// Milliseconds per call of each body, interleaved: every round times one group of 3 calls of
// each body in turn, so that clock and temperature drift during the run weighs on all of them
// alike (the BN+ReLU cost is a difference of two such times); median over `iters` rounds after
// `warmup` calls of each.
std::vector<double> time_interleaved_ms(const std::vector<kiln::Executable*>& exes, int warmup, int iters,
                                        const std::vector<std::function<void()>>& bodies) {
  for (size_t b = 0; b < bodies.size(); ++b) {
    for (int i = 0; i < warmup; ++i) bodies[b]();
    exes[b]->synchronize();
  }
  std::vector<std::vector<double>> samples(bodies.size());
  for (int i = 0; i < iters; ++i) {
    for (size_t b = 0; b < bodies.size(); ++b) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < 3; ++r) bodies[b]();
      exes[b]->synchronize();
      samples[b].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 3);
    }
  }
  std::vector<double> ms;
  for (auto& v : samples) ms.push_back(median(v));
  return ms;
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
  int warmup = 5, iters = 30;
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
      struct Variant {
        const char* name;
        bool conv_only, fuse;
      };
      std::vector<Variant> chosen;
      std::vector<std::unique_ptr<kiln::Executable>> exes;
      for (Variant v : {Variant{"conv", true, false}, Variant{"unfused", false, false}, Variant{"cbr", false, true}}) {
        if (!variants.empty() && variants.find("," + std::string(v.name) + ",") == std::string::npos) continue;
        kiln::CompileOptions o;
        o.device = kiln::Device::CUDA;
        o.precision = kiln::parse_precision(precision);
        o.batch = s.n, o.fuse_cbr = v.fuse, o.loss = false, o.input_grad = true;
        // The CUDA settings keep their defaults, which the KILN_* variables override when the
        // backend is made (KILN_CUDNN_TUNE_PLANS, KILN_TUNE_LOG, KILN_PLAN_CACHE: scripts/gpu_check.sh).
        exes.push_back(std::make_unique<kiln::Executable>(kiln::compile(block(s, v.conv_only), o), 1));
        std::mt19937 rng(7);
        fill(*exes.back(), exes.back()->program().input, rng);
        fill(*exes.back(), exes.back()->program().output_grad, rng);
        chosen.push_back(v);
      }
      const kiln::StepScalars step{0.f, 0, 1};
      std::vector<kiln::Executable*> all;
      std::vector<std::function<void()>> fwd_bodies, fwd_bwd_bodies, bwd_bodies;
      for (size_t i = 0; i < chosen.size(); ++i) {
        kiln::Executable* exe = exes[i].get();
        all.push_back(exe);
        fwd_bwd_bodies.push_back([exe, &step] {
          exe->run_forward(step);
          exe->run_backward(step);
        });
        // The backward alone, again and again on the last forward's saved tensors: splits the
        // cost between the two halves.
        bwd_bodies.push_back([exe, &step] { exe->run_backward(step); });
        fwd_bodies.push_back([exe, &step] { exe->run_forward(step); });
      }
      const std::vector<double> fwd = time_interleaved_ms(all, warmup, iters, fwd_bodies);
      const std::vector<double> fwd_bwd = time_interleaved_ms(all, warmup, iters, fwd_bwd_bodies);
      const std::vector<double> bwd = time_interleaved_ms(all, warmup, iters, bwd_bodies);
      for (size_t i = 0; i < chosen.size(); ++i)
        std::printf("{\"kind\": \"block\", \"impl\": \"kiln\", \"variant\": \"%s\", \"precision\": \"%s\", "
                    "\"shape\": [%d, %d, %d, %d, %d, %d], \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwd_bwd_ms\": %.4f}\n",
                    chosen[i].name, precision.c_str(), s.n, s.c, s.hw, s.k, s.kernel, s.stride, fwd[i], bwd[i],
                    fwd_bwd[i]);
      std::fflush(stdout);
    }
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln_cbr_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

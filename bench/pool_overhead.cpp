// The cost of one parallel loop on kiln's pool (core/parallel.h): 20,000 loops of 16 tasks, each
// task doing `work / 16` dependent additions, with a short serial gap between loops as a step's
// ops leave, at 0, 2,000 and 20,000 additions per loop. Prints microseconds per loop; pin it with
// taskset to the cores it should use.
//
//   kiln_pool_overhead_bench <threads>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/parallel.h"
#include "kiln/error.h"
#include "kiln/threads.h"

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  try {
    kiln::set_threads(threads);  // a count out of range is a kiln::Error naming the range
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln_pool_overhead_bench <threads>: %s\n", e.what());
    return 2;
  }
  std::atomic<int64_t> sink{0};
  for (int64_t work : {0, 2000, 20000}) {
    constexpr int kLoops = 20000;
    const auto start = std::chrono::steady_clock::now();
    for (int loop = 0; loop < kLoops; ++loop) {
      kiln::parallel_for(16, [&](int64_t i) {
        volatile double x = 0;
        for (int64_t k = 0; k < work / 16; ++k) x = x + 1.0;
        sink += i;
      });
      volatile double gap = 0;
      for (int k = 0; k < 200; ++k) gap = gap + 1.0;
    }
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
    std::printf("threads %d work %lld: %.2f us per parallel_for\n", threads, static_cast<long long>(work), us / kLoops);
  }
  return sink.load() > 0 ? 0 : 1;
}

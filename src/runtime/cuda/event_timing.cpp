#include "runtime/cuda/event_timing.h"

#include <algorithm>
#include <vector>

#include "runtime/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

// Start and stop events of each run, destroyed with the object.
struct RunEvents {
  std::vector<cudaEvent_t> events;
  RunEvents(int runs, const std::string& where) : events(2 * size_t(runs), nullptr) {
    for (auto& e : events) KILN_CUDA(cudaEventCreate(&e), where);
  }
  ~RunEvents() {
    for (auto e : events)
      if (e) cudaEventDestroy(e);
  }
  RunEvents(const RunEvents&) = delete;
  RunEvents& operator=(const RunEvents&) = delete;
};

}  // namespace

double median_event_ms(cudaStream_t stream, int runs, const std::function<bool()>& enqueue, const std::string& where) {
  if (runs < 1) fail("{}: timing needs at least one run, got {}", where, runs);
  if (!enqueue()) return -1;  // the warm-up
  RunEvents ev(runs, where);
  bool ok = true;
  for (int i = 0; i < runs && ok; ++i) {
    KILN_CUDA(cudaEventRecord(ev.events[2 * i], stream), where);
    ok = enqueue();
    KILN_CUDA(cudaEventRecord(ev.events[2 * i + 1], stream), where);
  }
  KILN_CUDA(cudaStreamSynchronize(stream), where);  // a kernel fault surfaces here and is fatal
  if (!ok) return -1;
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    float t = 0;
    KILN_CUDA(cudaEventElapsedTime(&t, ev.events[2 * i], ev.events[2 * i + 1]), where);
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace kiln::cuda

#pragma once
// CUDA Graph capture and replay of the step, with the step's scalars on the device (lr, step,
// seed: step_scalars_cuda.h says why a kernel's argument carries them). The two belong together:
// each captured graph keeps its nodes that write the scalars, and a replay gives those nodes the
// step's values, so the host does not wait for the launches already queued.
#include <cuda_runtime.h>

#include <vector>

#include "runtime/backend.h"

namespace kiln::cuda {

class GraphCapture {
 public:
  // The device's step scalars, zeroed (the current device, waited for).
  GraphCapture();
  ~GraphCapture();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

  const StepScalars* device_scalars() const { return device_scalars_; }
  // Writes the step's scalars in `main_stream`'s order; under capture, keeps the write's node for replay.
  void stage_scalars(const StepScalars& s, cudaStream_t main_stream);
  // Captures the work issued on `main_stream` (and the streams it waits on) until end, which
  // instantiates it as graph `graph`; replay(graph) launches it on `main_stream`.
  void begin(cudaStream_t main_stream);
  void end(int graph, cudaStream_t main_stream);
  // Abandons the capture in progress after an error (reported by whoever failed).
  void abort(cudaStream_t main_stream);
  void replay(int graph, const StepScalars& s, cudaStream_t main_stream);

 private:
  // The step's scalars on the device, written in stream order by a kernel whose argument they
  // are (step_scalars_cuda.h).
  StepScalars* device_scalars_ = nullptr;
  // Each captured graph, its instance, and its nodes that write the step's scalars (one per op
  // list it holds); replay() sets their argument. The graph is kept: its nodes name them.
  struct Captured {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    std::vector<cudaGraphNode_t> scalar_nodes;
  };
  std::vector<Captured> captured_;
  std::vector<cudaGraphNode_t> capture_scalar_nodes_;  // of the capture in progress
  static void release(Captured& c);
};

}  // namespace kiln::cuda

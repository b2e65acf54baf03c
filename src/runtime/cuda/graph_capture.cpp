#include "runtime/cuda/graph_capture.h"

#include <cstring>
#include <utility>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/step_scalars_cuda.h"

namespace kiln::cuda {

static_assert(sizeof(StepScalars) == sizeof(StepScalarBytes) && alignof(StepScalars) <= alignof(StepScalarBytes),
              "StepScalarBytes must hold StepScalars");

namespace {
StepScalarBytes bytes_of(const StepScalars& s) {
  StepScalarBytes b{};
  std::memcpy(b.bytes, &s, sizeof(s));
  return b;
}
}  // namespace

GraphCapture::GraphCapture() {
  KILN_CUDA(cudaMalloc(&device_scalars_, sizeof(StepScalars)), "step scalars");
  KILN_CUDA(cudaMemset(device_scalars_, 0, sizeof(StepScalars)), "step scalars");
  KILN_CUDA(cudaDeviceSynchronize(), "step scalars");
}

GraphCapture::~GraphCapture() {
  // Destructors must not throw: errors here only mean the device is already gone.
  for (Captured& c : captured_) release(c);
  if (device_scalars_) cudaFree(device_scalars_);
}

void GraphCapture::stage_scalars(const StepScalars& s, cudaStream_t main_stream) {
  write_step_scalars(bytes_of(s), reinterpret_cast<StepScalarBytes*>(device_scalars_), main_stream);
  KILN_CUDA(cudaGetLastError(), "step scalars");
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  KILN_CUDA(cudaStreamIsCapturing(main_stream, &capturing), "step scalars");
  if (capturing == cudaStreamCaptureStatusNone) return;
  // Under capture the write just became the node the main stream's next work depends on: kept,
  // so that replay() can give it each step's values.
  const cudaGraphNode_t* last = nullptr;
  size_t count = 0;
  KILN_CUDA(cudaStreamGetCaptureInfo(main_stream, &capturing, nullptr, nullptr, &last, nullptr, &count),
            "step scalars");
  if (count != 1 || !last) fail("internal: the captured write of the step scalars is not the stream's last node");
  capture_scalar_nodes_.push_back(last[0]);
}

void GraphCapture::release(Captured& c) {
  if (c.exec) cudaGraphExecDestroy(c.exec);
  if (c.graph) cudaGraphDestroy(c.graph);
  c = Captured{};
}

void GraphCapture::begin(cudaStream_t main_stream) {
  // Thread-local: the data loader's threads may call the CUDA runtime meanwhile (pinned memory).
  capture_scalar_nodes_.clear();
  KILN_CUDA(cudaStreamBeginCapture(main_stream, cudaStreamCaptureModeThreadLocal), "CUDA Graph capture");
}

void GraphCapture::end(int graph, cudaStream_t main_stream) {
  cudaGraph_t captured = nullptr;
  KILN_CUDA(cudaStreamEndCapture(main_stream, &captured), "CUDA Graph capture");
  if (graph >= int(captured_.size())) captured_.resize(size_t(graph) + 1);
  Captured& c = captured_[size_t(graph)];
  release(c);
  c.graph = captured;
  c.scalar_nodes = std::move(capture_scalar_nodes_);  // replay() gives them each step's values
  capture_scalar_nodes_.clear();
  const cudaError_t status = cudaGraphInstantiate(&c.exec, captured, 0);
  if (status != cudaSuccess) {
    c.exec = nullptr;
    release(c);
    fail("cannot instantiate the captured CUDA Graph ({}); use --cuda-graphs 0", cudaGetErrorString(status));
  }
}

void GraphCapture::abort(cudaStream_t main_stream) {
  capture_scalar_nodes_.clear();
  cudaGraph_t partial = nullptr;
  if (cudaStreamEndCapture(main_stream, &partial) == cudaSuccess && partial) cudaGraphDestroy(partial);
  cudaGetLastError();  // the capture's own error was reported by whoever failed
}

void GraphCapture::replay(int graph, const StepScalars& s, cudaStream_t main_stream) {
  if (graph >= int(captured_.size()) || !captured_[size_t(graph)].exec)
    fail("internal: CUDA Graph {} was never captured", graph);
  Captured& c = captured_[size_t(graph)];
  // This launch's scalars become the argument of the graph's scalar nodes; launches already
  // queued keep theirs, so the host does not wait for them.
  StepScalarBytes bytes = bytes_of(s);
  StepScalarBytes* dst = reinterpret_cast<StepScalarBytes*>(device_scalars_);
  void* args[] = {&bytes, &dst};
  cudaKernelNodeParams params{};
  params.func = const_cast<void*>(write_step_scalars_kernel());
  params.gridDim = dim3(1), params.blockDim = dim3(1), params.sharedMemBytes = 0;
  params.kernelParams = args, params.extra = nullptr;
  for (cudaGraphNode_t node : c.scalar_nodes)
    KILN_CUDA(cudaGraphExecKernelNodeSetParams(c.exec, node, &params), "CUDA Graph replay");
  KILN_CUDA(cudaGraphLaunch(c.exec, main_stream), "CUDA Graph replay");
}

}  // namespace kiln::cuda

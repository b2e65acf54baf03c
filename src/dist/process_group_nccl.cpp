// The NCCL process group: the ranks meet at MASTER_ADDR:MASTER_PORT (dist/rendezvous.h), rank 0's
// NCCL unique id travels over that connection, and every rank creates its communicator from it.
// The connections then stay open as the group's liveness check: a rank whose peer ends
// unexpectedly aborts its communicator and exits, instead of waiting in a collective forever.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "dist/rendezvous.h"
#include "kiln/data_parallel.h"
#include "kiln/error.h"

namespace kiln {
namespace {

// The exit status of a rank stopped because another rank ended or hung: the launcher then names
// the rank that failed first.
constexpr int kLostPeerExit = 3;

void check_nccl(ncclResult_t status, const char* call, int rank) {
  if (status != ncclSuccess && status != ncclInProgress)
    fail("rank {}: NCCL call {} failed: {} ({}){}", rank, call, ncclGetErrorString(status), int(status),
         status == ncclSystemError || status == ncclRemoteError
             ? "; a peer rank may have ended or be unreachable (see its output)"
             : "");
}

void check_cuda(cudaError_t status, const char* call, int rank) {
  if (status != cudaSuccess) fail("rank {}: CUDA call {} failed: {}", rank, call, cudaGetErrorString(status));
}

ncclDataType_t nccl_type(DType dtype, int rank) {
  switch (dtype) {
    case DType::F16: return ncclHalf;
    case DType::BF16: return ncclBfloat16;
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    default: fail("rank {}: averaging {} values over ranks is not supported (fp16, bf16, fp32, fp64)", rank,
                  dtype_name(dtype));
  }
}

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(const RankEnv& env, double timeout_seconds) : env_(env), rendezvous_(env, timeout_seconds) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    if (env.device < 0 || env.device >= count)
      fail("rank {}: GPU {} was asked for (KILN_RANK_DEVICE / LOCAL_RANK) but {} GPU(s) are visible; start at most "
           "{} ranks on this machine", env.rank, env.device, count, count);
    check_cuda(cudaSetDevice(env.device), "cudaSetDevice", env.rank);
    ncclUniqueId id{};
    std::vector<uint8_t> blob;
    if (env.rank == 0) {
      check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId", env.rank);
      blob.assign(reinterpret_cast<const uint8_t*>(&id), reinterpret_cast<const uint8_t*>(&id) + sizeof id);
    }
    blob = rendezvous_.share(blob);
    if (blob.size() != sizeof id)
      fail("rank {}: the NCCL id from rank 0 has {} bytes, not {}: are all ranks the same kiln build?", env.rank,
           blob.size(), sizeof id);
    std::memcpy(&id, blob.data(), sizeof id);
    check_nccl(ncclCommInitRank(&comm_, env.ranks, id, env.rank), "ncclCommInitRank", env.rank);
    check_cuda(cudaStreamCreateWithFlags(&host_stream_, cudaStreamNonBlocking), "cudaStreamCreate", env.rank);
    check_cuda(cudaMalloc(&host_values_, kHostValues * sizeof(double)), "cudaMalloc", env.rank);
    rendezvous_.watch([this](int lost, const std::string& why) {
      stop_rank(fmt::format("rank {} ended while this rank trained ({})", lost, why));
    });
    watchdog_ = std::thread([this] { watch_progress(); });
  }

  ~NcclProcessGroup() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    if (watchdog_.joinable()) watchdog_.join();
    if (left_) rendezvous_.finish();  // a planned end: the peers do not take it for a lost rank
    else rendezvous_.abandon();
    if (comm_) ncclCommDestroy(comm_);
    if (host_values_) cudaFree(host_values_);
    if (host_stream_) cudaStreamDestroy(host_stream_);
  }

  int rank() const override { return env_.rank; }
  int ranks() const override { return env_.ranks; }
  int device() const override { return env_.device; }

  void average(void* data, size_t count, DType dtype, void* stream) override {
    check_nccl(ncclAllReduce(data, data, count, nccl_type(dtype, env_.rank), ncclAvg, comm_,
                             static_cast<cudaStream_t>(stream)),
               "ncclAllReduce", env_.rank);
  }

  void broadcast(void* data, size_t bytes, int root, void* stream) override {
    check_nccl(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, static_cast<cudaStream_t>(stream)),
               "ncclBroadcast", env_.rank);
  }

  void reduce_host(std::vector<double>& values, HostReduce op) override {
    if (values.size() > kHostValues)
      fail("internal: {} host values reduced over ranks at once; at most {}", values.size(), kHostValues);
    check_cuda(cudaSetDevice(env_.device), "cudaSetDevice", env_.rank);
    const size_t bytes = values.size() * sizeof(double);
    check_cuda(cudaMemcpyAsync(host_values_, values.data(), bytes, cudaMemcpyHostToDevice, host_stream_),
               "cudaMemcpyAsync", env_.rank);
    check_nccl(ncclAllReduce(host_values_, host_values_, values.size(), ncclFloat64,
                             op == HostReduce::Sum ? ncclSum : ncclMax, comm_, host_stream_),
               "ncclAllReduce", env_.rank);
    check_cuda(cudaMemcpyAsync(values.data(), host_values_, bytes, cudaMemcpyDeviceToHost, host_stream_),
               "cudaMemcpyAsync", env_.rank);
    check_cuda(cudaStreamSynchronize(host_stream_), "cudaStreamSynchronize", env_.rank);
  }

  void watchdog(double seconds) override {
    std::lock_guard<std::mutex> lock(mutex_);
    watchdog_seconds_ = seconds;
    last_progress_ = std::chrono::steady_clock::now();
  }

  void leave() override { left_ = true; }

  void progress() override {
    std::lock_guard<std::mutex> lock(mutex_);
    last_progress_ = std::chrono::steady_clock::now();
  }

  void abort(const std::string& why) override {
    std::call_once(aborted_, [&] {
      std::fprintf(stderr, "kiln: rank %d: aborting its NCCL communicator: %s\n", env_.rank, why.c_str());
      ncclCommAbort(comm_);
    });
  }

 private:
  static constexpr size_t kHostValues = 64;

  // A peer has gone or hung: the collectives in flight would never end. Says so, aborts the
  // communicator (which ends them) and leaves the process. A checkpoint write in progress is never
  // torn: checkpoints are written to a temporary file and renamed.
  [[noreturn]] void stop_rank(const std::string& why) {
    std::fprintf(stderr, "kiln: error: rank %d stops: %s\n", env_.rank, why.c_str());
    std::fflush(stderr);
    // ncclCommAbort should return promptly; should it not, the process ends all the same.
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(10));
      std::_Exit(kLostPeerExit);
    }).detach();
    abort(why);
    std::fflush(stdout);
    std::_Exit(kLostPeerExit);
  }

  // The watchdog: a rank whose trainer reports no progress for watchdog_seconds_ (a collective
  // that never ends because some peer hangs without exiting) stops as for a lost peer.
  void watch_progress() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::unique_lock<std::mutex> lock(mutex_);
      if (closing_) return;
      if (watchdog_seconds_ <= 0) continue;
      const double idle =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - last_progress_).count();
      if (idle < watchdog_seconds_) continue;
      const double limit = watchdog_seconds_;
      lock.unlock();
      stop_rank(fmt::format("no training progress for {:.0f} s (the watchdog's limit, kiln train --rank-timeout): a "
                            "peer rank hangs or a collective never completes",
                            limit));
    }
  }

  RankEnv env_;
  dist::Rendezvous rendezvous_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t host_stream_ = nullptr;
  double* host_values_ = nullptr;
  std::once_flag aborted_;
  std::mutex mutex_;
  bool closing_ = false;
  bool left_ = false;
  double watchdog_seconds_ = 0;
  std::chrono::steady_clock::time_point last_progress_ = std::chrono::steady_clock::now();
  std::thread watchdog_;
};

}  // namespace

std::shared_ptr<ProcessGroup> join_process_group(const RankEnv& env, double timeout_seconds) {
  return std::make_shared<NcclProcessGroup>(env, timeout_seconds);
}

bool data_parallel_built() { return true; }

}  // namespace kiln

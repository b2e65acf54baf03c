#pragma once
// The engine an op's prepare chose for a convolution problem (by timing), kept per graph cache
// (device and cuDNN options) and shape, and read by every run of that problem: one instance for
// the convolution with statistics (conv_stats_cuda.cpp), one for the weight gradient
// (conv_wgrad_cuda.cpp).
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "kiln/error.h"
#include "runtime/cuda/cudnn_graphs.h"

namespace kiln::cuda {

template <class Engine>
class EngineChoices {
 public:
  // The engine chosen for `p`, if prepare chose one.
  std::optional<Engine> find(const CudnnGraphs& graphs, const ConvProblem& p) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = chosen_.find(key(graphs, p));
    if (it == chosen_.end()) return std::nullopt;
    return it->second;
  }
  void set(const CudnnGraphs& graphs, const ConvProblem& p, Engine e) {
    std::lock_guard<std::mutex> lock(mutex_);
    chosen_[key(graphs, p)] = e;
  }
  // The engine chosen for `p`; a run before its prepare is an error naming `what` and the problem.
  Engine at(const CudnnGraphs& graphs, const ConvProblem& p, const char* what, const std::string& where) const {
    if (const std::optional<Engine> e = find(graphs, p)) return *e;
    fail("{}: the {} of {} was not prepared; run the op's prepare first", where, what, conv_problem_str(p));
  }

 private:
  using Key = std::pair<const CudnnGraphs*, std::string>;
  static Key key(const CudnnGraphs& graphs, const ConvProblem& p) { return {&graphs, conv_problem_str(p)}; }

  mutable std::mutex mutex_;
  std::map<Key, Engine> chosen_;
};

}  // namespace kiln::cuda

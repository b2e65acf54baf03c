#pragma once
// A ProcessGroup whose ranks are threads of this process, for the CPU tests of data-parallel
// training (NCCL's group needs GPUs): every collective meets at a barrier, and each rank computes
// the result from every rank's values in rank order, so all ranks get the same bytes.
#include <barrier>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/data_parallel.h"

namespace kiln::testing {

class ThreadRanks {
 public:
  explicit ThreadRanks(int ranks) : ranks_(ranks), meet_(ranks), slots_(size_t(ranks)), hosts_(size_t(ranks)) {}

  // The group rank `rank` trains with (one per thread).
  std::shared_ptr<ProcessGroup> rank(int rank) { return std::make_shared<Rank>(*this, rank); }
  // How many collectives each rank has taken part in, summed over the ranks.
  int collectives() const { return collectives_; }

 private:
  class Rank final : public ProcessGroup {
   public:
    Rank(ThreadRanks& all, int rank) : all_(all), rank_(rank) {}
    int rank() const override { return rank_; }
    int ranks() const override { return all_.ranks_; }
    int device() const override { return 0; }
    void average(void* data, size_t count, DType dtype, void*) override {
      if (dtype != DType::F32 && dtype != DType::F64) throw std::runtime_error("thread ranks average fp32/fp64 only");
      all_.slots_[size_t(rank_)] = data;
      all_.meet_.arrive_and_wait();
      std::vector<double> mean(count, 0.0);
      for (int r = 0; r < all_.ranks_; ++r)
        for (size_t i = 0; i < count; ++i)
          mean[i] += dtype == DType::F32 ? double(static_cast<const float*>(all_.slots_[size_t(r)])[i])
                                         : static_cast<const double*>(all_.slots_[size_t(r)])[i];
      all_.meet_.arrive_and_wait();  // every rank has read every other's values
      for (size_t i = 0; i < count; ++i) {
        if (dtype == DType::F32) static_cast<float*>(data)[i] = float(mean[i] / all_.ranks_);
        else static_cast<double*>(data)[i] = mean[i] / all_.ranks_;
      }
      counted();
    }
    void broadcast(void* data, size_t bytes, int root, void*) override {
      all_.slots_[size_t(rank_)] = data;
      all_.meet_.arrive_and_wait();
      std::vector<std::byte> copy(bytes);
      std::memcpy(copy.data(), all_.slots_[size_t(root)], bytes);
      all_.meet_.arrive_and_wait();
      std::memcpy(data, copy.data(), bytes);
      counted();
    }
    void reduce_host(std::vector<double>& values, HostReduce op) override {
      all_.hosts_[size_t(rank_)] = values;
      all_.meet_.arrive_and_wait();
      std::vector<double> out = all_.hosts_[0];
      for (int r = 1; r < all_.ranks_; ++r)
        for (size_t i = 0; i < out.size(); ++i) {
          const double v = all_.hosts_[size_t(r)].at(i);
          out[i] = op == HostReduce::Sum ? out[i] + v : std::max(out[i], v);
        }
      all_.meet_.arrive_and_wait();
      values = out;
      counted();
    }
    void abort(const std::string&) override {}
    void watchdog(double) override {}
    void progress() override {}
    void leave() override {}

   private:
    void counted() {
      std::lock_guard<std::mutex> lock(all_.mutex_);
      ++all_.collectives_;
    }
    ThreadRanks& all_;
    int rank_;
  };

  int ranks_;
  std::barrier<> meet_;
  std::vector<void*> slots_;
  std::vector<std::vector<double>> hosts_;
  std::mutex mutex_;
  int collectives_ = 0;
};

}  // namespace kiln::testing

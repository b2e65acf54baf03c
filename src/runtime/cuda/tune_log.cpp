#include "runtime/cuda/tune_log.h"

#include <cstddef>
#include <fstream>
#include <map>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::cuda {

void append_tune_log(const CudnnGraphs& graphs, const std::string& path) {
  if (path.empty()) return;
  static std::mutex mutex;
  static std::map<const CudnnGraphs*, size_t> logged;  // records already logged, per graph cache
  std::lock_guard<std::mutex> lock(mutex);
  size_t& written = logged[&graphs];
  const std::vector<TuneRecord> records = graphs.tune_records();
  if (records.size() <= written) return;
  std::ofstream out(path, std::ios::app);
  if (!out) return;
  for (size_t i = written; i < records.size(); ++i) {
    const TuneRecord& r = records[i];
    const nlohmann::json line = {{"kind", r.kind},
                                 {"problem", conv_problem_str(r.problem)},
                                 {"plans_offered", r.plans_offered},
                                 {"plans_tried", r.plans_tried},
                                 {"first_plan_ms", r.first_plan_ms},
                                 {"best_plan_ms", r.best_plan_ms},
                                 {"workspace", r.workspace},
                                 {"plan", r.plan_name},
                                 {"from_plan_cache", r.from_cache},
                                 {"exhaustive", r.exhaustive},
                                 {"seconds", r.seconds}};
    out << line.dump() << '\n';
  }
  written = records.size();
}

}  // namespace kiln::cuda

#pragma once
// A file of tuned cuDNN plan choices ("experience table", docs/cbr.md): for each graph key (GPU,
// cuDNN version, graph name, shape, options) the name of the engine configuration that engine
// choice kept (cuDNN's tag: engine id and knob values), so that later processes rebuild that one plan instead of building and timing every plan again
// (about 5 s per graph at batch 256 on an H200), and pick the same plan every run.
//
// Host-only (no CUDA, no cuDNN types): cudnn_plan_replay.cpp turns entries into frontend calls.
// Format: JSON {"format": "kiln-plan-cache", "version": 1, "plans": {key: entry}}. Writes go to a
// temporary file in the same folder that is renamed over the cache, merged with entries another
// process may have added meanwhile, so the file is never half written.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace kiln::cuda {

struct CachedPlan {
  std::string name;   // cuDNN's tag of the engine configuration, e.g. "eng62_k2=6_k13=1"
  double ms = 0;      // its time when tuned
  size_t workspace = 0;  // bytes
  // Chosen over every plan that built (exhaustive tuning); a choice of bounded tuning is replaced
  // when a run asks for exhaustive tuning.
  bool exhaustive = false;
};

// The plan cache every run shares unless told otherwise: $XDG_CACHE_HOME/kiln/cudnn-plans.json
// when XDG_CACHE_HOME is set to an absolute path (the XDG base directory rules), else
// $HOME/.cache/kiln/cudnn-plans.json; "" when neither variable gives a folder.
std::string default_plan_cache_path();

class PlanCache {
 public:
  // Reads `path` when it exists; a file that is not a plan cache of this version is a kiln::Error
  // naming it (delete it, or point KILN_PLAN_CACHE elsewhere). A missing file is an empty cache.
  explicit PlanCache(std::string path);

  std::optional<CachedPlan> find(const std::string& key) const;
  // Adds or replaces the entry and rewrites the file (kiln::Error naming it when it cannot).
  void store(const std::string& key, const CachedPlan& plan);
  // Drops an entry that no longer builds (a cuDNN upgrade) and rewrites the file.
  void forget(const std::string& key);

  const std::string& path() const { return path_; }
  size_t size() const { return plans_.size(); }

 private:
  // Rewrites the file with this cache's entries over the file's current ones, less `dropped`.
  void write(const std::string* dropped = nullptr);

  std::string path_;
  std::map<std::string, CachedPlan> plans_;
};

}  // namespace kiln::cuda

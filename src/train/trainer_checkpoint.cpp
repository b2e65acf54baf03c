// The Trainer's checkpoints: the state it writes, the recipe a resumed run must share, and
// restoring (whole, or the weights only). The training loop is trainer.cpp.
#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "compile/optimizer_family.h"
#include "kiln/checkpoint.h"
#include "kiln/error.h"
#include "kiln/trainer.h"
#include "train/non_finite_text.h"
#include "train/recipe_fields.h"

namespace kiln {
namespace {

std::string join(const std::vector<float>& v) {
  std::string s;
  for (float x : v) {
    if (!s.empty()) s += ',';
    s += fmt::format("{:.9g}", x);
  }
  return s;
}

constexpr const char* kFormat = "kiln-checkpoint-2";        // with the recipe
constexpr const char* kLegacyFormat = "kiln-checkpoint-1";  // without: only the seed is compared
constexpr const char* kRecipePrefix = "recipe.";
}  // namespace

// "" when every value is finite; else what the tensor holds, for a message.
std::string non_finite_text(const NamedTensor& t) {
  const NonFinite bad = find_non_finite(t);
  if (bad.count == 0) return "";
  return fmt::format("tensor '{}' holds {} non-finite value{} (the first, {}, at index {})", t.name, bad.count,
                     bad.count == 1 ? "" : "s", bad.first_value, bad.first);
}

std::string non_finite_text(const std::vector<NamedTensor>& tensors) {
  for (const NamedTensor& t : tensors)
    if (std::string bad = non_finite_text(t); !bad.empty()) return bad;
  return "";
}
void check_checkpoint_target(const TrainOptions& t) {
  if (t.checkpoint.empty()) return;
  std::error_code ec;
  // A folder first, whatever --resume and --overwrite say: neither would help.
  if (std::filesystem::is_directory(t.checkpoint, ec))
    fail("checkpoint '{}' is a folder, and --checkpoint (TrainOptions::checkpoint) names the file to write; pass a "
         "file path, e.g. '{}'", t.checkpoint, (std::filesystem::path(t.checkpoint) / "run.safetensors").string());
  if (t.resume || t.overwrite) return;
  if (!std::filesystem::exists(t.checkpoint, ec)) return;
  fail("checkpoint '{}' already exists: this new run would replace it after its first epoch. Continue that run with "
       "--resume (TrainOptions::resume), replace it with --overwrite (TrainOptions::overwrite), or give this run "
       "another checkpoint path; '{}' is left as it was", t.checkpoint, t.checkpoint);
}

std::vector<NamedTensor> Trainer::state() {
  const Program& p = exe_->program();
  std::vector<int> ids(p.params);
  ids.insert(ids.end(), p.buffers.begin(), p.buffers.end());
  ids.insert(ids.end(), p.opt_state_regions.begin(), p.opt_state_regions.end());
  std::vector<std::vector<std::byte>> reads;
  exe_->read_many(ids, reads);  // one wait on the GPU for all of them
  std::vector<NamedTensor> tensors;
  for (size_t i = 0; i < ids.size(); ++i) {
    const TensorSpec& t = p.tensors[ids[i]];
    tensors.push_back(NamedTensor{t.name, t.dtype, t.shape, std::move(reads[i])});
  }
  return tensors;
}

std::string Trainer::last_good_checkpoint() const {
  if (opt_.checkpoint.empty()) return "No checkpoint path was set, so no good state was kept";
  if (saved_epochs_ > 0)
    return fmt::format("The last good checkpoint is '{}' (after epoch {}), left as it was", opt_.checkpoint,
                       saved_epochs_);
  std::error_code ec;
  if (std::filesystem::exists(opt_.checkpoint, ec))
    return fmt::format("There is no good checkpoint of this run: it has not written '{}' yet (the file there, from "
                       "an earlier run, is left as it was)", opt_.checkpoint);
  return fmt::format("There is no good checkpoint: this run has not written '{}' yet", opt_.checkpoint);
}

// The rows of train/recipe_fields.cpp, then the data's.
std::vector<std::pair<std::string, std::string>> Trainer::recipe() const {
  std::vector<std::pair<std::string, std::string>> r = recipe_values({exe_->program(), model_name_, opt_});
  for (const auto& [key, value] : opt_.data_recipe) r.emplace_back(key, value);
  return r;
}

void Trainer::save_checkpoint(const std::string& path, int epochs_done) { save_state(path, epochs_done, state()); }

void Trainer::save_state(const std::string& path, int epochs_done, const std::vector<NamedTensor>& tensors) {
  if (const std::string bad = non_finite_text(tensors); !bad.empty())
    fail("refusing to write checkpoint '{}': {}; the model has diverged (lower the learning rate or add warm-up). "
         "An existing '{}' is left as it was", path, bad, path);
  std::map<std::string, std::string> meta = {
      {"format", kFormat},
      {"kiln_version", kVersion},
      {"epochs", std::to_string(opt_.epochs)},
      {"epochs_done", std::to_string(epochs_done)},
      {"global_step", std::to_string(global_step_)},
      {"seed", std::to_string(opt_.seed)},
      {"ranks", std::to_string(ranks())},
      {"norm_mean", join(norm_.mean)},
      {"norm_std", join(norm_.std)}};
  if (!class_names_.empty()) meta["class_names"] = nlohmann::json(class_names_).dump();
  for (const auto& [key, value] : recipe()) meta[kRecipePrefix + key] = value;
  save_safetensors(path, tensors, meta);
}

void Trainer::check_recipe(const std::string& path, const std::map<std::string, std::string>& metadata) const {
  const bool legacy = metadata.at("format") == kLegacyFormat;
  std::map<std::string, std::string> theirs;
  for (const auto& [key, value] : metadata)
    if (key.rfind(kRecipePrefix, 0) == 0) theirs[key.substr(std::strlen(kRecipePrefix))] = value;
  std::erase_if(theirs, [](const auto& kv) { return !recipe_key_compared(kv.first); });
  if (legacy) {  // written before the recipe was recorded: its seed is all there is to compare
    theirs.clear();
    if (auto seed = metadata.find("seed"); seed != metadata.end()) theirs["seed"] = seed->second;
  }
  auto mine = recipe();
  std::erase_if(mine, [](const auto& kv) { return !recipe_key_compared(kv.first); });
  std::map<std::string, std::string> mine_by_key(mine.begin(), mine.end());
  auto differs = [&](const char* key) {
    auto a = theirs.find(key), b = mine_by_key.find(key);
    return a != theirs.end() && b != mine_by_key.end() && a->second != b->second;
  };
  // A setting of another optimizer or schedule, recorded on one side only, is no difference of its
  // own: the optimizer's or schedule's is listed.
  auto other_kind = [&](const std::string& key) {
    const RecipeField* row = recipe_field(key);
    return row && row->decided_by && differs(row->decided_by);
  };
  std::vector<std::string> differences;
  for (const auto& [key, value] : mine) {
    auto it = theirs.find(key);
    if (it == theirs.end()) {
      if (!legacy && !other_kind(key))
        differences.push_back(fmt::format("{}: not recorded in the checkpoint, {} in this run", key, value));
    } else if (it->second != value) {
      const RecipeField* row = recipe_field(key);
      differences.push_back(fmt::format("{}: {} in the checkpoint, {} in this run{}", key, it->second, value,
                                        row ? "; resume with " + recipe_fix(*row, it->second) : ""));
    }
  }
  for (const auto& [key, value] : theirs)
    if (!mine_by_key.count(key) && !other_kind(key))
      differences.push_back(fmt::format("{}: {} in the checkpoint, not used in this run", key, value));
  if (differences.empty()) return;
  std::string list;
  for (const std::string& d : differences) list += "\n  " + d;
  fail("cannot resume from checkpoint '{}': it was written with a different recipe, so this run would not continue "
       "it:{}\nResume with the checkpoint's settings (only the epoch count may change), or start a new run with "
       "another checkpoint path", path, list);
}

int Trainer::load_checkpoint(const std::string& path) { return restore(path, false); }

void Trainer::load_weights(const std::string& path) { restore(path, true); }

TorchWeightsLoaded Trainer::load_torch_weights(const std::string& path, const TorchWeightsOptions& options) {
  return kiln::load_torch_weights(*exe_, path, options);
}

int Trainer::restore(const std::string& path, bool weights_only) {
  const SafetensorsFile file = load_safetensors(path);
  const Program& p = exe_->program();
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || (format->second != kFormat && format->second != kLegacyFormat))
    fail("'{}' is not a kiln checkpoint: its metadata 'format' is '{}', kiln reads {} and {}; resume from a "
         "checkpoint that kiln wrote", path, format == file.metadata.end() ? "" : format->second, kFormat,
         kLegacyFormat);
  if (!weights_only) check_recipe(path, file.metadata);

  // Everything is checked before anything is restored: a refused checkpoint changes nothing.
  std::vector<std::pair<int, const NamedTensor*>> restores;
  auto check = [&](int id) {
    const TensorSpec& t = p.tensors[id];
    const NamedTensor* saved = file.find(t.name);
    if (!saved && t.role == TensorRole::OptState) {
      for (const NamedTensor& other : file.tensors) {
        const OptimizerFamily* theirs = optimizer_of_state(other.name);
        if (theirs && theirs->name != p.options.optimizer.name)
          fail("checkpoint '{}' was written with the {} optimizer (it holds '{}') but this run uses {}, whose state "
               "'{}' it lacks; resume with --optimizer {}, or start a new run with another checkpoint path", path,
               theirs->name, other.name, p.options.optimizer.name, t.name, theirs->name);
      }
    }
    if (!saved) fail("checkpoint '{}' has no tensor '{}'; was it written for another model?", path, t.name);
    if (saved->shape != t.shape || saved->dtype != t.dtype)
      fail("checkpoint '{}': tensor '{}' is {} {} but the model needs {} {}", path, t.name, dtype_name(saved->dtype),
           shape_str(saved->shape), dtype_name(t.dtype), shape_str(t.shape));
    if (const std::string bad = non_finite_text(*saved); !bad.empty())
      fail("checkpoint '{}': {}; it was written by a run that had diverged. Resume from an earlier checkpoint or "
           "start a new run", path, bad);
    restores.emplace_back(id, saved);
  };
  for (int id : p.params) check(id);
  for (int id : p.buffers) check(id);
  if (!weights_only)
    for (int id : p.opt_state_regions) check(id);
  auto meta = [&](const std::string& key) {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end()) fail("checkpoint '{}' lacks metadata '{}'", path, key);
    return it->second;
  };
  auto floats = [&](const std::string& key) {
    const std::string s = meta(key);
    std::vector<float> v;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t next = s.find(',', pos);
      v.push_back(std::stof(s.substr(pos, next - pos)));
      if (!std::isfinite(v.back()))
        fail("checkpoint '{}': metadata '{}' holds a non-finite value ({}); start a new run", path, key, s);
      if (next == std::string::npos) break;
      pos = next + 1;
    }
    return v;
  };
  int64_t global_step = 0;
  int epochs_done = 0, ranks = 1;
  ChannelStats norm;
  std::vector<std::string> class_names;
  if (auto names = file.metadata.find("class_names"); names != file.metadata.end()) {
    const nlohmann::json parsed = nlohmann::json::parse(names->second, nullptr, false);
    if (!parsed.is_array()) fail("checkpoint '{}' has malformed metadata 'class_names'", path);
    for (const auto& name : parsed) {
      if (!name.is_string()) fail("checkpoint '{}' has malformed metadata 'class_names'", path);
      class_names.push_back(name.get<std::string>());
    }
  }
  try {
    global_step = std::stoll(meta("global_step"));
    norm.mean = floats("norm_mean");
    norm.std = floats("norm_std");
    epochs_done = std::stoi(meta("epochs_done"));
    // Written since data-parallel training; earlier checkpoints come from one GPU.
    if (auto r = file.metadata.find("ranks"); r != file.metadata.end()) ranks = std::stoi(r->second);
  } catch (const std::logic_error&) {
    fail("checkpoint '{}' has malformed metadata", path);
  }
  for (const auto& [id, saved] : restores) exe_->write(id, saved->data.data(), saved->data.size());
  norm_ = std::move(norm);
  class_names_ = std::move(class_names);
  if (weights_only) return epochs_done;
  global_step_ = global_step;
  epochs_done_ = epochs_done;
  resumed_ranks_ = ranks;
  return epochs_done_;
}

}  // namespace kiln

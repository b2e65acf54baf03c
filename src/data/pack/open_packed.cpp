#include "data/pack/open_packed.h"

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/file_io.h"
#include "data/image_folder/image_source.h"
#include "data/pack/pack_writer.h"
#include "kiln/error.h"

namespace kiln {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kRemake = "re-create the pack with kiln pack";

// A split with no records (a pack without "val").
class NoRecords : public RecordReader {
 public:
  int64_t count() const override { return 0; }
  int32_t label(int64_t) const override { fail("an empty split has no labels"); }
  void read(int64_t, std::vector<uint8_t>&) const override { fail("an empty split has no records"); }
  std::string name(int64_t) const override { return "(none)"; }
};

// The checks of one kiln-pack.json, each failure naming it.
struct ManifestReader {
  std::string path;

  [[noreturn]] void bad(const std::string& what) const {
    fail("kiln pack manifest '{}' is malformed: {}; {}", path, what, kRemake);
  }
  const json& field(const json& object, const std::string& key, const std::string& where) const {
    if (!object.is_object()) bad(fmt::format("{} is not a JSON object", where));
    auto it = object.find(key);
    if (it == object.end()) bad(fmt::format("{} has no \"{}\"", where, key));
    return *it;
  }
  int64_t integer(const json& object, const std::string& key, const std::string& where, int64_t lo, int64_t hi) const {
    const json& v = field(object, key, where);
    if (!v.is_number_integer()) bad(fmt::format("\"{}\" of {} is not a whole number", key, where));
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) bad(fmt::format("\"{}\" of {} is {}, outside [{}, {}]", key, where, x, lo, hi));
    return x;
  }
  std::string string(const json& v, const std::string& what) const {
    if (!v.is_string()) bad(fmt::format("{} is not a string", what));
    return v.get<std::string>();
  }
  // A file of the pack folder itself: no folder part, so a manifest cannot point elsewhere.
  std::string file_name(const json& v, const std::string& key, const std::string& where) const {
    std::string name = string(v, fmt::format("\"{}\" of {}", key, where));
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      bad(fmt::format("\"{}\" of {} names '{}', not a file name in the pack folder", key, where, name));
    return name;
  }
  std::vector<std::string> file_names(const json& object, const std::string& key, const std::string& where) const {
    const json& list = field(object, key, where);
    if (!list.is_array()) bad(fmt::format("\"{}\" of {} is not a list", key, where));
    std::vector<std::string> names;
    for (const json& v : list) names.push_back(file_name(v, key, where));
    return names;
  }
  PackSplit split(const json& splits, const std::string& name) const {
    const std::string where = fmt::format("split \"{}\"", name);
    const json& s = field(splits, name, "\"splits\"");
    PackSplit out;
    out.name = name;
    out.count = integer(s, "count", where, 0, int64_t(1) << 40);
    out.index = file_name(field(s, "index", where), "index", where);
    // Packs made before source lists have none: their records are named by shard alone.
    if (s.contains("sources")) out.sources = file_name(s["sources"], "sources", where);
    out.shards = file_names(s, "shards", where);
    const json& bytes = field(s, "shard_bytes", where);
    if (!bytes.is_array()) bad(fmt::format("\"shard_bytes\" of {} is not a list", where));
    for (const json& v : bytes) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        bad(fmt::format("an entry of \"shard_bytes\" of {} is not a whole number >= 0", where));
      out.shard_bytes.push_back(v.get<int64_t>());
    }
    if (out.shard_bytes.size() != out.shards.size())
      bad(fmt::format("{} lists {} shards but {} shard sizes", where, out.shards.size(), out.shard_bytes.size()));
    if (out.count > 0 && out.shards.empty()) bad(fmt::format("{} has {} records but no shards", where, out.count));
    return out;
  }
};

}  // namespace

const PackSplit* PackManifest::find(const std::string& name) const {
  for (const PackSplit& s : splits)
    if (s.name == name) return &s;
  return nullptr;
}

PackManifest read_pack_manifest(const std::string& dir) {
  const ManifestReader r{(fs::path(dir) / pack_format::kManifestName).string()};
  const std::vector<uint8_t> bytes = read_file_bytes(
      r.path, fmt::format("'{}' is not a kiln pack: make one with kiln pack SRC {}", dir, dir));
  json m;
  try {
    m = json::parse(bytes.begin(), bytes.end());
  } catch (const json::exception& e) {
    r.bad(fmt::format("not valid JSON ({})", e.what()));
  }
  if (!m.is_object()) r.bad("not a JSON object");
  if (r.string(r.field(m, "format", "the manifest"), "\"format\"") != pack_format::kFormatName)
    r.bad(fmt::format("\"format\" is not \"{}\"", pack_format::kFormatName));
  PackManifest out;
  const json& version = r.field(m, "version", "the manifest");
  if (!version.is_number_integer()) r.bad("\"version\" is not a whole number");
  out.version = version.get<int>();
  if (out.version != pack_format::kVersion)
    fail("kiln pack '{}' is of format version {}; this kiln reads version {}: use the kiln that made it, or {} "
         "with this one", dir, out.version, pack_format::kVersion, kRemake);
  const json& classes = r.field(m, "classes", "the manifest");
  if (!classes.is_array() || classes.empty()) r.bad("\"classes\" is not a non-empty list");
  for (const json& c : classes) out.classes.push_back(r.string(c, "an entry of \"classes\""));
  const json& settings = r.field(m, "settings", "the manifest");
  out.max_side = int(r.integer(settings, "max_side", "\"settings\"", 1, 65535));
  out.quality = int(r.integer(settings, "quality", "\"settings\"", 1, 100));
  const json& splits = r.field(m, "splits", "the manifest");
  out.splits.push_back(r.split(splits, "train"));
  if (splits.contains("val")) out.splits.push_back(r.split(splits, "val"));
  return out;
}

DataSplits open_packed_dataset(const std::string& dir, const DataOptions& o) {
  if (!o.val.empty())
    fail("--val names a validation image folder, but '{}' is a kiln pack, which holds its own validation split; "
         "drop --val (to validate on other images, pack them as the pack's val/ folder)", dir);
  const PackManifest manifest = read_pack_manifest(dir);
  const int num_classes = int(manifest.classes.size());
  DataSplits splits;
  splits.format = "packed";
  splits.transform = o.transform;  // as given: a pack's images are not looked at before training
  splits.train = std::make_unique<ImageSource>(std::make_unique<PackRecords>(dir, *manifest.find("train"), num_classes),
                                               manifest.classes, o.transform, true, o.skip_bad);
  std::unique_ptr<RecordReader> val;
  if (const PackSplit* s = manifest.find("val"))
    val = std::make_unique<PackRecords>(dir, *s, num_classes);
  else
    val = std::make_unique<NoRecords>();
  splits.test = std::make_unique<ImageSource>(std::move(val), manifest.classes, o.transform, false, o.skip_bad);
  return splits;
}

}  // namespace kiln

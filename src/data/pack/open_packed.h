#pragma once
// A kiln pack folder (kiln pack's output, format in pack_writer.h) as training and evaluation
// sources: the same decoding and transforms as an image folder, the bytes from mapped shards.
#include <string>
#include <vector>

#include "data/pack/pack_records.h"
#include "kiln/image_folder.h"

namespace kiln {

// kiln-pack.json, parsed and checked.
struct PackManifest {
  int version = 0;
  std::vector<std::string> classes;
  int max_side = 0, quality = 0;
  std::vector<PackSplit> splits;  // "train" first, then "val" when present
  const PackSplit* find(const std::string& name) const;
};

// Reads `dir`/kiln-pack.json. A missing file, malformed JSON, a missing or mistyped field, another
// format, a newer version, a split whose shard lists disagree: kiln::Error naming the file and
// the fix.
PackManifest read_pack_manifest(const std::string& dir);

// The train split from "train"; the test split from "val", or with no "val" an empty split of the
// same classes. Each is an ImageSource over PackRecords with options.transform and
// options.skip_bad; format "packed", transform options.transform.
DataSplits open_packed_dataset(const std::string& dir, const DataOptions& options);

}  // namespace kiln

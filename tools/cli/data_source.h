#pragma once
// Where kiln train's data was, recorded in its checkpoint's recipe (recipe.data_source), so that
// `kiln eval --checkpoint C` without --data evaluates on the data C was trained on. Paths are
// recorded absolute, so the checkpoint finds its data from any working folder.
#include <optional>
#include <string>

#include "cli/data_options.h"

namespace kiln::cli {

struct DataSource {
  std::string path;    // --data, absolute
  std::string format;  // as detected or given: idx, cifar10, imagefolder or packed
  std::string val;     // --val, absolute; "" when not given
};

// The recipe's value for a run on `a` read as `format`: one JSON object {"path", "format", "val"}.
std::string data_source_text(const DataArgs& a, const std::string& format);

// The recorded source of `checkpoint`'s metadata value `text`; nullopt when `text` is empty (a
// checkpoint written before kiln recorded it). Malformed text is a kiln::Error naming the checkpoint.
std::optional<DataSource> parse_data_source(const std::string& text, const std::string& checkpoint);

}  // namespace kiln::cli

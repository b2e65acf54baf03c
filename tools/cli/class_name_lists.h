#pragma once
// Class names as kiln writes them into checkpoints and exported files (metadata "class_names", a
// JSON array of strings, one per model output), read back, and two such lists compared, so that a
// checkpoint's names (cli/checkpoint_data_fit.h) and a model file's (cli/model_file_metadata.h) are
// read and told apart from the data's the same way.
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace kiln::cli {

// The names of `json`, a JSON array of strings; nullopt when it is not one (not JSON, not an
// array, or an element that is not a string).
std::optional<std::vector<std::string>> parse_class_names(const std::string& json);

// The first label whose name differs between `a` and `b`, or whose name only one of them has;
// nullopt when they are the same list.
std::optional<size_t> first_differing_label(const std::vector<std::string>& a, const std::vector<std::string>& b);

// Whether `a` and `b` hold the same names in another order: kiln labels class folders in the
// sorted order of their names, so such data cannot be relabelled to match by renaming nothing.
bool same_names_reordered(const std::vector<std::string>& a, const std::vector<std::string>& b);

// "'a', 'b', 'c'", at most `shown` names, then ", ... (N names)" for a long list.
std::string class_names_text(const std::vector<std::string>& names, size_t shown = 5);

}  // namespace kiln::cli

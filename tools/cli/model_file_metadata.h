#pragma once
// What an ONNX file that `kiln export --onnx` wrote says of the data its weights were trained on,
// in its metadata_props (src/export/model_metadata.h writes them, the importer keeps them in
// ImportedModel::metadata): "norm_mean" and "norm_std", the per-channel mean and standard deviation
// of pixel / 255 the model's inputs were normalized with (comma-separated numbers), and
// "class_names", the name of each output (a JSON array). Read and checked here, for the runs that
// start from the file's weights (cli/model_file_data.h); a value kiln cannot use is a kiln::Error
// naming the file, the key and the fix, never a silent fallback to the data's statistics.
#include <optional>
#include <string>
#include <vector>

#include "cli/model_source.h"
#include "kiln/data.h"

namespace kiln::cli {

// The metadata keys, as kiln's checkpoints and exports spell them.
inline constexpr const char* kNormMeanKey = "norm_mean";
inline constexpr const char* kNormStdKey = "norm_std";
inline constexpr const char* kClassNamesKey = "class_names";

// Whether the file's metadata holds either normalization key (its values unread).
bool has_file_normalization(const ModelSource& source);

// The file's normalization for a model of `channels` input channels; nullopt when it holds neither
// key. A kiln::Error when it holds one key without the other, a value that is not comma-separated
// numbers, another count than `channels`, a mean that is not finite, or a standard deviation that
// is not finite and > 0.
std::optional<ChannelStats> file_normalization(const ModelSource& source, int channels);

// The file's class names for a model of `classes` outputs; nullopt when it names none. A
// kiln::Error when the value is not a JSON array of strings, or names another count of classes.
std::optional<std::vector<std::string>> file_class_names(const ModelSource& source, int classes);

// "0.485,0.456,0.406": the numbers of a normalization as notes print them.
std::string floats_text(const std::vector<float>& values);

}  // namespace kiln::cli

#pragma once
// Whether data fits the model of a checkpoint, said in the data's terms (image size, channels,
// classes) before any tensor is loaded: otherwise the first sign of data of another kind is a
// tensor whose shape does not match ("conv1.conv.weight [32,3,3,3]"), which says nothing of why.
#include <string>

#include "cli/checkpoint_model.h"
#include "kiln/data.h"

namespace kiln::cli {

// `source` is the `split` split of the data at `data`. A kiln::Error when its images' height,
// width or channels differ from those the checkpoint's model was trained on, when its class count
// differs, or when both name their classes and the names differ; it names the checkpoint's data
// and this data, and what to do.
void check_data_fits_checkpoint(const CheckpointModel& m, const SampleSource& source, const std::string& data,
                                const std::string& split);

}  // namespace kiln::cli

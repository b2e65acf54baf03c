#pragma once
// `kiln train`'s checks of the classes the data holds, before anything is compiled: one class is
// refused in the data's own terms (an image folder given one level too high names the folder to
// give instead), and classes without a training sample are warned about.
#include "cli/train_command.h"
#include "kiln/image_folder.h"

namespace kiln::cli {

void check_class_count(const TrainArgs& a, const DataSplits& data);

}  // namespace kiln::cli

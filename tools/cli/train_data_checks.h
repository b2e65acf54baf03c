#pragma once
// What `kiln train` checks of its options against the data and the model: values that cannot work
// are refused before anything is compiled, and runs that will not learn, or did not, are said to.
#include <string>
#include <vector>

#include "cli/common_options.h"
#include "cli/train_command.h"
#include "kiln/blueprint.h"
#include "kiln/compile.h"
#include "kiln/image_folder.h"
#include "kiln/trainer.h"

namespace kiln::cli {

// A kiln::Error for a test set of another image size than the training set (the model is compiled
// for one size), a --crop-pad as large as the images, and a model whose poolings and strides need
// larger images. `model` is what --model names (cli/model_source.h).
void check_data_fits(const CommonOptions& o, const TrainArgs& a, const DataSplits& data, const Blueprint& model);

// Why there is no test set to measure accuracy on.
std::string no_test_set_reason(const TrainArgs& a, const std::string& format);

// A warning for --batch 1 with batch normalization, which rarely learns.
void warn_batch_of_one(const CommonOptions& o, const TrainArgs& a, const Blueprint& model, const CompileOptions& c);

// A warning when the last epoch's training accuracy is no better than guessing: the run's rc is 0.
void warn_at_chance(const std::vector<EpochReport>& reports, const SampleSource& train);

}  // namespace kiln::cli

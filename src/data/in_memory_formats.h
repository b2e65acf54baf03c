#pragma once
// The dataset formats read whole into memory, as folders of their standard file names (their rows
// in dataset_formats.cpp; load_dataset, kiln/data.h, reads them).
#include <filesystem>

#include "kiln/data.h"

namespace kiln {

// train-images-idx3-ubyte / train-labels-idx1-ubyte (train) or t10k-* (test); as many classes as
// the training labels name.
Dataset load_idx_dir(const std::filesystem::path& dir, bool train);

// data_batch_1.bin .. data_batch_5.bin (train) or test_batch.bin (test), in `dir` or in
// dir/cifar-10-batches-bin.
Dataset load_cifar_dir(const std::filesystem::path& dir, bool train);

}  // namespace kiln

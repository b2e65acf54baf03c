#pragma once
// The labels of an IDX label file alone (magic 0x00000801), checked as read_idx checks them: the
// class range of a test split comes from the training labels without reading training images.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

std::vector<int32_t> read_idx_labels(const std::string& labels_path);

}  // namespace kiln

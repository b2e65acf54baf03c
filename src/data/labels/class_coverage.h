#pragma once
// What a data set's labels say about its classes, for formats whose classes are numbers (IDX,
// CIFAR-10) rather than named folders: which classes have no sample, and whether that can be a
// data set at all or is a damaged label file.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// Samples of each class 0..classes-1 (labels outside that range are not counted).
std::vector<int64_t> samples_per_class(const std::vector<int32_t>& labels, int classes);

// The classes without a sample, as ranges for a message: "3, 10-254".
std::string class_ranges(const std::vector<int>& classes);

// Refuses training labels whose largest value implies more classes without a sample than with
// one (a label byte 12 or 255 among 0..9 would make a 256-class model, 246 classes never seen):
// the error names the file, the classes in use and the stray labels with their first records.
// Fewer empty classes are a data set's business (EMNIST letters use 1..26) and only warned about
// (classes_without_samples).
void check_training_labels(const std::vector<int32_t>& labels, const std::string& file);

// The classes 0..classes-1 that no label names.
std::vector<int> classes_without_samples(const std::vector<int32_t>& labels, int classes);

// Refuses test labels outside the training labels' classes 0..classes-1: a model trained on
// those has no output for them. Names the file, the labels and their first records.
void check_test_labels(const std::vector<int32_t>& labels, int classes, const std::string& file,
                       const std::string& training_file);

}  // namespace kiln

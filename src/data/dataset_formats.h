#pragma once
// The dataset formats a --data folder may hold, one row each: its name, what a folder of it holds,
// how it is recognized and how it is opened. open_dataset and detect_dataset_format
// (kiln/image_folder.h), load_dataset (kiln/data.h) and the CLI's --format check loop over these
// rows, so a new format is its reader and one row in dataset_formats.cpp.
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "kiln/data.h"
#include "kiln/image_folder.h"

namespace kiln {

struct DatasetFormat {
  const char* name;  // as --format, DataSplits::format and a checkpoint's recipe spell it: "idx"
  // What a folder of the format holds, worded so that "no <description>" says what a folder lacks:
  // "IDX files (train-images-idx3-ubyte)".
  const char* description;
  // How messages name the test split of the folder `dir` ("the test set (<dir>/t10k-images-idx3-
  // ubyte)"); `val` is --val, empty when not given.
  std::string (*test_split_name)(const std::string& dir, const std::string& val);
  // Whether the classes are folders (a class's images in a folder of its own) and the test split a
  // folder beside them (<dir>/val, or --val): messages about one class or a missing test split
  // then name folders.
  bool class_folders = false;
  // Whether the folder `dir` (one that exists) holds this format.
  bool (*detect)(const std::filesystem::path& dir);
  // Both splits of the folder as sources (DataSplits::format is set by open_dataset).
  DataSplits (*open)(const std::string& dir, const DataOptions& options);
  // When no format detects `dir`: refuses it with a message of the format's own when the folder is
  // nearly one of it (image files but no class folders: one class's folder given); else returns.
  // nullptr where the format has no such near miss.
  void (*refuse_near_miss)(const std::filesystem::path& dir) = nullptr;
  // The formats read whole into memory (load_dataset): one split as a Dataset, and what to do when
  // the folder does not exist. nullptr for the formats read file by file as they train.
  Dataset (*load)(const std::filesystem::path& dir, bool train) = nullptr;
  const char* missing_fix = nullptr;
};

// Every format, in the order detect_dataset_format tries them: the image folder last, since any
// subfolder makes a folder look like one.
std::span<const DatasetFormat> dataset_formats();

// The row named `name`, or nullptr.
const DatasetFormat* find_dataset_format(const std::string& name);

// What a --format value asks for: nullptr for "auto" (detect_dataset_format decides), else the row
// it names. Any other value is a kiln::Error listing the choices.
const DatasetFormat* chosen_dataset_format(const std::string& choice);

// The values --format takes: "auto, idx, cifar10, packed or imagefolder", "auto" spelled as
// `auto_words` ("auto (from what --data holds)" in the option's help).
std::string dataset_format_choices(const std::string& auto_words = "auto");

// `items` as a sentence lists them: "a, b or c" (`last_joint` " or "), "a and b" (" and ").
std::string spoken_list(const std::vector<std::string>& items, const std::string& last_joint);

}  // namespace kiln

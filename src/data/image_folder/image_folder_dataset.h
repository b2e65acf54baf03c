#pragma once
// The image folder as a dataset format (its row in data/dataset_formats.cpp): both splits opened,
// every file checked first, and the near miss of a folder of images without class folders.
#include <filesystem>
#include <string>

#include "kiln/image_folder.h"

namespace kiln {

// Scanned, every file checked (checked_folder.h), then opened as sources.
DataSplits open_image_folder_dataset(const std::string& dir, const DataOptions& options);

// A folder holding images directly but no class subfolders (usually --data one level too deep, at
// one class's folder) is refused, naming the folder above to give instead; any other returns.
void refuse_images_without_class_folders(const std::filesystem::path& dir);

}  // namespace kiln

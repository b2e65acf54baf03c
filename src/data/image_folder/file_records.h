#pragma once
// The records of an image folder: one file each.
#include "data/image_folder/record_reader.h"
#include "kiln/image_folder.h"

namespace kiln {

class FileRecords : public RecordReader {
 public:
  explicit FileRecords(ImageFolderIndex index) : index_(std::move(index)) {}
  int64_t count() const override { return int64_t(index_.files.size()); }
  int32_t label(int64_t i) const override { return index_.labels[i]; }
  void read(int64_t i, std::vector<uint8_t>& bytes) const override;
  std::string name(int64_t i) const override { return index_.files[i]; }

 private:
  ImageFolderIndex index_;
};

}  // namespace kiln

#pragma once
// Where the encoded images of a split come from: files of an image folder, or records of a
// packed file. The image source decodes and transforms what a reader hands it.
#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

class RecordReader {
 public:
  virtual ~RecordReader() = default;
  virtual int64_t count() const = 0;
  virtual int32_t label(int64_t index) const = 0;
  // The encoded bytes of record `index` (JPEG or PNG) into `bytes`; a kiln::Error naming the
  // record when it cannot be read. Safe to call from several threads at once.
  virtual void read(int64_t index, std::vector<uint8_t>& bytes) const = 0;
  // What messages call the record: its file, or shard and record number.
  virtual std::string name(int64_t index) const = 0;
};

}  // namespace kiln

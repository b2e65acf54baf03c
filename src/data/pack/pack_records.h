#pragma once
// The records of one split of a kiln pack (format in pack_writer.h), read from its shards mapped
// into memory: a read is a bounds check, a CRC-32 and a copy, with no system call.
#include <cstdint>
#include <string>
#include <vector>

#include "data/image_folder/record_reader.h"

namespace kiln {

// One split as kiln-pack.json describes it.
struct PackSplit {
  std::string name;                 // "train", "val"
  int64_t count = 0;                // records
  std::string index;                // index file name, "train.kpi"
  std::vector<std::string> shards;  // shard file names, in shard number order
  std::vector<int64_t> shard_bytes; // their sizes
};

class PackRecords : public RecordReader {
 public:
  // Maps every shard of `split` in the pack folder `dir` and reads its index, checking them all
  // (kiln::Error naming the file and the fix): a missing shard, one of another size than
  // kiln-pack.json records (truncated), a bad magic or version, an index of the wrong size or
  // count, an entry pointing outside its shard or with a label outside [0, num_classes).
  PackRecords(const std::string& dir, const PackSplit& split, int num_classes);
  ~PackRecords() override;  // unmaps the shards
  PackRecords(const PackRecords&) = delete;
  PackRecords& operator=(const PackRecords&) = delete;

  int64_t count() const override { return int64_t(entries_.size()); }
  int32_t label(int64_t i) const override { return int32_t(entries_[size_t(i)].label); }
  // The payload, after checking its CRC-32: a mismatch is a kiln::Error naming the shard and the
  // record ("record 17 of 'pack/train-00000.kpk' is damaged (checksum mismatch); ...").
  void read(int64_t i, std::vector<uint8_t>& bytes) const override;
  // "record 17 of pack/train-00000.kpk" (17: the record's number in the split, its sample index).
  std::string name(int64_t i) const override;

 private:
  struct Shard {
    std::string path;
    const uint8_t* data = nullptr;
    size_t size = 0;
  };
  struct Entry {
    uint64_t offset = 0;
    uint32_t shard = 0, size = 0, label = 0, crc = 0;
  };
  void unmap();

  std::vector<Shard> shards_;
  std::vector<Entry> entries_;
};

}  // namespace kiln

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
  std::string sources;              // source list file name, "train.kps"; empty in packs made before them
};

class PackRecords : public RecordReader {
 public:
  // Maps every shard of `split` in the pack folder `dir` and its source list, and reads its index,
  // checking them all (kiln::Error naming the file and the fix): a missing shard, one of another
  // size than kiln-pack.json records (truncated), a bad magic or version, an index or source list
  // of the wrong size or count, source offsets out of order, an entry pointing outside its shard
  // or with a label outside [0, num_classes).
  PackRecords(const std::string& dir, const PackSplit& split, int num_classes);
  ~PackRecords() override;  // unmaps the shards
  PackRecords(const PackRecords&) = delete;
  PackRecords& operator=(const PackRecords&) = delete;

  int64_t count() const override { return int64_t(entries_.size()); }
  int32_t label(int64_t i) const override { return int32_t(entries_[size_t(i)].label); }
  // The payload, after checking its CRC-32: a mismatch is a kiln::Error naming the record as
  // name() does, and the fix.
  void read(int64_t i, std::vector<uint8_t>& bytes) const override;
  // "record 17 of pack/train-00000.kpk (source: train/fish/img_0007.jpg)" (17: the record's number
  // in the split, its sample index), so that every message about a record names the file the user
  // can replace. A pack without a source list says so in place of the source.
  std::string name(int64_t i) const override;
  // Record i's source path as the source list holds it; empty without a source list.
  std::string source(int64_t i) const;

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
  void map_sources(const std::string& dir, const PackSplit& split);

  std::vector<Shard> shards_;
  std::vector<Entry> entries_;
  Shard sources_;  // the mapped source list; data null without one
  const uint8_t* source_text_ = nullptr;  // where its paths' bytes begin
};

}  // namespace kiln

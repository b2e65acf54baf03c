// Fuzz target "pack": the kiln pack reader (src/data/pack/: read_pack_manifest, open_packed_dataset,
// PackRecords over mapped shards) and the samples it feeds.
// Feeds: byte 0 (flags: bit 0 the entry, bit 1 the plain transform, bit 2 --skip-bad, bit 3 one
// channel; bits 4..7 the class count of the direct entry), then up to eight files separated by
// kSeparator, written each execution to an emptied tmpfs folder as kiln-pack.json, train.kpi,
// train-00000.kpk, train-00001.kpk, val.kpi, val-00000.kpk, train.kps and val.kps (inputs made
// before source lists hold the first six: packs without them, which kiln still reads). Entry 0:
// open_packed_dataset on the folder (the manifest names the files and their sizes). Entry 1:
// PackRecords on a split the harness describes from the files present (train.kpi, the shards with
// their true sizes, the count the index header claims, train.kps when present), so mutations reach
// the index, shard and source list checks without matching the manifest.
// Asserts: success or kiln::Error; on success labels lie in [0, classes), every record has a name
// (naming its source when the split has a source list), reads (or is a kiln::Error: a checksum
// mismatch) and the first samples of each split fill their shape exactly.
#include <algorithm>
#include <memory>

#include "data/image_folder/image_source.h"
#include "data/pack/open_packed.h"
#include "data/pack/pack_records.h"
#include "data/pack/pack_writer.h"
#include "fuzz_support.h"

namespace kiln::fuzz {
namespace {

constexpr const char* kFiles[] = {"kiln-pack.json", "train.kpi",     "train-00000.kpk", "train-00001.kpk",
                                  "val.kpi",        "val-00000.kpk", "train.kps",       "val.kps"};
constexpr size_t kTrainSources = 6;  // kFiles[kTrainSources] is train.kps
constexpr int64_t kMaxSampleBytes = int64_t(1) << 22;

void check_samples(const SampleSource& source) {
  const SampleShape shape = source.shape();
  if (source.count() == 0 || shape.size() > kMaxSampleBytes) return;
  KILN_FUZZ_CHECK(shape.height > 0 && shape.width > 0 && (shape.channels == 1 || shape.channels == 3));
  std::vector<uint8_t> out(size_t(shape.size()) + 1, 0xa5);
  for (int64_t i = 0; i < std::min<int64_t>(source.count(), 3); ++i) {
    const int32_t label = source.write_sample(i, 7, 0, out.data());
    KILN_FUZZ_CHECK(label >= 0 && label < source.num_classes());
    KILN_FUZZ_CHECK(out.back() == 0xa5);
  }
}

void direct(const std::vector<Bytes>& files, int num_classes, const ImageTransform& t, bool skip_bad) {
  PackSplit split;
  split.name = "train";
  split.index = "train.kpi";
  for (size_t f = 2; f < std::min<size_t>(files.size(), 4); ++f) {
    split.shards.push_back(kFiles[f]);
    split.shard_bytes.push_back(int64_t(files[f].size()));
  }
  const Bytes index = files.size() > 1 ? files[1] : Bytes();
  split.count = index.size() >= 16 ? int64_t(std::min<uint64_t>(pack_format::load_u64(index.data() + 8), 1ull << 40)) : 0;
  if (files.size() > kTrainSources) split.sources = kFiles[kTrainSources];
  auto records = std::make_unique<PackRecords>(scratch_dir(), split, num_classes);
  KILN_FUZZ_CHECK(records->count() == split.count);
  std::vector<uint8_t> bytes;
  for (int64_t i = 0; i < records->count(); ++i) {
    KILN_FUZZ_CHECK(records->label(i) >= 0 && records->label(i) < num_classes);
    KILN_FUZZ_CHECK(!records->name(i).empty());
    KILN_FUZZ_CHECK(split.sources.empty() || (!records->source(i).empty() &&
                                              records->name(i).find("(source: " + records->source(i)) != std::string::npos));
    accept_kiln_errors([&] { records->read(i, bytes); });
  }
  std::vector<std::string> classes;
  for (int c = 0; c < num_classes; ++c) classes.push_back(fmt::format("c{}", c));
  check_samples(ImageSource(std::move(records), classes, t, true, skip_bad));
}

}  // namespace

void pack_input(Bytes input) {
  ByteReader r(input);
  const uint8_t flags = r.u8();
  const std::vector<Bytes> files = split_parts(r.rest(), std::size(kFiles));
  accept_kiln_errors([&] {
    clear_scratch();
    for (size_t f = 0; f < files.size(); ++f) write_scratch(kFiles[f], files[f]);
    DataOptions o;
    o.format = "packed";
    o.transform.kind = flags & 2 ? ImageTransform::Kind::Plain : ImageTransform::Kind::ImageNet;
    o.transform.size = 12;
    o.transform.eval_resize = 14;
    o.transform.channels = flags & 8 ? 1 : 3;
    o.skip_bad = flags & 4;
    if (flags & 1) {
      direct(files, 1 + (flags >> 4), o.transform, o.skip_bad);
      return;
    }
    const DataSplits splits = open_packed_dataset(scratch_dir(), o);
    KILN_FUZZ_CHECK(splits.format == "packed" && splits.train && splits.test);
    KILN_FUZZ_CHECK(splits.train->num_classes() >= 1 && splits.test->num_classes() == splits.train->num_classes());
    check_samples(*splits.train);
    check_samples(*splits.test);
  });
}

}  // namespace kiln::fuzz

KILN_FUZZ_TARGET(pack_input)

// Fuzz target "cifar10": the CIFAR-10 binary reader (read_cifar10; load_dataset(dir, "cifar10")).
// Feeds: byte 0 picks the entry (even: read_cifar10 of the files; odd: load_dataset of a folder
// holding them as test_batch.bin, or as data_batch_1..5.bin when there are several), the rest is up
// to 5 batch files separated by kSeparator (written to tmpfs each execution).
// Asserts: success or kiln::Error; on success the Dataset is consistent (32x32x3, count labels,
// count * 3072 image bytes, labels in [0, 10)) and its first samples go through DatasetSource.
#include <algorithm>

#include "fuzz_support.h"
#include "kiln/data.h"

namespace kiln::fuzz {

void cifar10_input(Bytes input) {
  ByteReader r(input);
  const uint8_t mode = r.u8();
  const std::vector<Bytes> files = split_parts(r.rest(), 5);
  accept_kiln_errors([&] {
    clear_scratch();
    std::vector<std::string> paths;
    const bool load_dir = mode % 2 == 1;
    const bool train = files.size() > 1;
    for (size_t i = 0; i < files.size(); ++i)
      paths.push_back(write_scratch(
          load_dir && !train ? std::string("test_batch.bin") : fmt::format("data_batch_{}.bin", i + 1), files[i]));
    const Dataset ds = load_dir ? load_dataset(scratch_dir(), "cifar10", train) : read_cifar10(paths);
    KILN_FUZZ_CHECK(ds.height == 32 && ds.width == 32 && ds.channels == 3 && ds.num_classes == 10);
    KILN_FUZZ_CHECK(int64_t(ds.labels.size()) == ds.count);
    KILN_FUZZ_CHECK(int64_t(ds.images.size()) == ds.count * ds.image_size());
    for (int32_t label : ds.labels) KILN_FUZZ_CHECK(label >= 0 && label < 10);
    const DatasetSource source(ds, Augment{mode % 5, mode % 3 == 0});
    std::vector<uint8_t> out(size_t(source.shape().size()));
    for (int64_t i = 0; i < std::min<int64_t>(ds.count, 3); ++i)
      KILN_FUZZ_CHECK(source.write_sample(i, mode, 0, out.data()) == ds.labels[size_t(i)]);
  });
}

}  // namespace kiln::fuzz

KILN_FUZZ_TARGET(cifar10_input)

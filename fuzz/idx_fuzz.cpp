// Fuzz target "idx": the MNIST IDX reader (read_idx, and load_dataset(dir, "idx") which counts the
// classes from the labels).
// Feeds: byte 0 picks the entry (even: read_idx with num_classes = byte / 2 + 1; odd: load_dataset on
// a folder holding the pair under the standard training names), the rest is the images file, then
// kSeparator, then the labels file (both written to tmpfs each execution).
// Asserts: success or kiln::Error; on success the Dataset is consistent (count labels, count * H * W
// image bytes, 1 channel, every label in [0, num_classes)), and its first samples go through
// DatasetSource with a padded crop and flip (drawn from byte 0) without touching memory outside it.
#include <algorithm>

#include "fuzz_support.h"
#include "kiln/data.h"

namespace kiln::fuzz {

void idx_input(Bytes input) {
  ByteReader r(input);
  const uint8_t mode = r.u8();
  const std::vector<Bytes> files = split_parts(r.rest(), 2);
  accept_kiln_errors([&] {
    clear_scratch();
    const std::string images = write_scratch("train-images-idx3-ubyte", files[0]);
    const std::string labels = write_scratch("train-labels-idx1-ubyte", files.size() > 1 ? files[1] : Bytes());
    const int classes = mode / 2 + 1;
    const Dataset ds = mode % 2 == 0 ? read_idx(images, labels, classes) : load_dataset(scratch_dir(), "idx", true);
    KILN_FUZZ_CHECK(ds.count >= 0 && ds.height > 0 && ds.width > 0 && ds.channels == 1);
    KILN_FUZZ_CHECK(int64_t(ds.labels.size()) == ds.count);
    using u128 = unsigned __int128;  // the product of three 32-bit sizes can pass 2^64
    KILN_FUZZ_CHECK(u128(ds.images.size()) == u128(uint64_t(ds.count)) * uint64_t(ds.height) * uint64_t(ds.width));
    KILN_FUZZ_CHECK(mode % 2 == 1 || ds.num_classes == classes);
    KILN_FUZZ_CHECK(ds.num_classes >= 0 && ds.num_classes <= 256);
    for (int32_t label : ds.labels) KILN_FUZZ_CHECK(label >= 0 && label < ds.num_classes);
    if (ds.count == 0 || ds.image_size() > (1 << 16)) return;
    const DatasetSource source(ds, Augment{mode % 7, mode % 3 == 0});
    std::vector<uint8_t> out(size_t(source.shape().size()));
    for (int64_t i = 0; i < std::min<int64_t>(ds.count, 4); ++i)
      KILN_FUZZ_CHECK(source.write_sample(i, mode, 1, out.data()) == ds.labels[size_t(i)]);
  });
}

}  // namespace kiln::fuzz

KILN_FUZZ_TARGET(idx_input)

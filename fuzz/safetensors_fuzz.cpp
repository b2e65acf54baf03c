// Fuzz target "safetensors": the checkpoint reader (load_safetensors, kiln/checkpoint.h), which
// kiln train --resume, kiln eval and Trainer::load_weights open first.
// Feeds: the whole input as one file (written to tmpfs each execution).
// Also read with SafetensorsReadOptions::skip_unsupported_dtypes (PyTorch's own files).
// Asserts: success or kiln::Error; on success every tensor's bytes match its shape and dtype, names
// are unique and found by find(), no checksum is left in the metadata, find_non_finite stays within
// the tensor, and a file saved back from what was read (when save_safetensors accepts it) loads
// again to the same tensors and metadata.
#include <set>

#include "fuzz_support.h"
#include "kiln/checkpoint.h"

namespace kiln::fuzz {
namespace {

bool same(const SafetensorsFile& a, const SafetensorsFile& b) {
  if (a.tensors.size() != b.tensors.size() || a.metadata != b.metadata) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const NamedTensor &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.dtype != y.dtype || x.shape != y.shape || x.data != y.data) return false;
  }
  return true;
}

}  // namespace

void safetensors_input(Bytes input) {
  // Read as load_torch_weights reads PyTorch's files (dtypes kiln has no DType for read past):
  // every name once, among the tensors or the skipped entries, each skipped shape non-negative.
  accept_kiln_errors([&] {
    const std::string path = write_scratch("state_dict.safetensors", input);
    SafetensorsReadOptions lenient;
    lenient.skip_unsupported_dtypes = true;
    const SafetensorsFile file = load_safetensors(path, lenient);
    std::set<std::string> names;
    for (const NamedTensor& t : file.tensors) KILN_FUZZ_CHECK(names.insert(t.name).second);
    for (const SkippedTensor& t : file.skipped) {
      KILN_FUZZ_CHECK(names.insert(t.name).second);
      KILN_FUZZ_CHECK(file.find_skipped(t.name) == &t);
      for (int64_t d : t.shape) KILN_FUZZ_CHECK(d >= 0);
    }
    // A file the strict read takes holds nothing to skip, and reads the same either way.
    try {
      const SafetensorsFile strict = load_safetensors(path);
      KILN_FUZZ_CHECK(file.skipped.empty() && same(strict, file));
    } catch (const Error&) {
      KILN_FUZZ_CHECK(!file.skipped.empty());
    }
  });
  accept_kiln_errors([&] {
    const std::string path = write_scratch("checkpoint.safetensors", input);
    const SafetensorsFile file = load_safetensors(path);
    std::set<std::string> names;
    for (const NamedTensor& t : file.tensors) {
      KILN_FUZZ_CHECK(names.insert(t.name).second);
      KILN_FUZZ_CHECK(file.find(t.name) == &t);
      unsigned __int128 bytes = dtype_size(t.dtype);
      for (int64_t d : t.shape) {
        KILN_FUZZ_CHECK(d >= 0);
        bytes *= uint64_t(d);
        if (bytes > t.data.size()) bytes = t.data.size() + 1;  // a mismatch either way; no overflow
      }
      KILN_FUZZ_CHECK(bytes == t.data.size());
      const NonFinite nf = find_non_finite(t);
      KILN_FUZZ_CHECK(nf.count >= 0 && nf.count <= int64_t(t.data.size()));
      KILN_FUZZ_CHECK((nf.count == 0) == (nf.first == -1));
      KILN_FUZZ_CHECK(nf.first < int64_t(t.data.size()));
    }
    for (const auto& [key, value] : file.metadata) KILN_FUZZ_CHECK(!key.starts_with("kiln.crc32."));
    const std::string copy = write_scratch("copy.safetensors", Bytes());
    try {
      save_safetensors(copy, file.tensors, file.metadata);
    } catch (const Error&) {
      return;  // names the writer refuses (empty): the reader may still read other tools' files
    }
    KILN_FUZZ_CHECK(same(load_safetensors(copy), file));
  });
}

}  // namespace kiln::fuzz

KILN_FUZZ_TARGET(safetensors_input)

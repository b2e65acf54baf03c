// safetensors reader/writer. Layout: u64 LE header length, JSON header, raw data. (Where a
// checkpoint may be written, and its lock: src/train/checkpoint_lock.cpp.)
#include "kiln/safetensors.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/file_io.h"
#include "kiln/error.h"

namespace kiln {
namespace {

using ordered_json = nlohmann::ordered_json;
using json = nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";
// Same cap as the Python implementation: a larger header means a corrupt length field.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// Metadata "kiln.crc32.<tensor>": the CRC-32 of the tensor's data (see kiln/safetensors.h).
constexpr std::string_view kChecksumPrefix = "kiln.crc32.";

bool is_checksum_key(const std::string& key) { return key.starts_with(kChecksumPrefix); }

uint32_t checksum(std::span<const std::byte> data) {
  return uint32_t(crc32_z(0L, reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

// As written: 8 lowercase hex digits.
std::string checksum_text(uint32_t crc) { return fmt::format("{:08x}", crc); }

bool parse_checksum(const std::string& text, uint32_t& out) {
  const char* end = text.data() + text.size();
  const auto [at, ec] = std::from_chars(text.data(), end, out, 16);
  return text.size() == 8 && ec == std::errc() && at == end;
}

// Damage that only a checksum sees: the file parses, but its bytes are not the ones written.
[[noreturn]] void fail_corrupt(const std::string& path, const std::string& what) {
  fail("checkpoint '{}' is corrupt: {} (the file was damaged after it was written: disk, copy or transfer); "
       "restore it from a backup or start a new run", path, what);
}

// Moves the checksums out of `metadata` (the caller's metadata is what is left), by tensor name.
std::map<std::string, uint32_t> take_checksums(const std::string& path,
                                               std::map<std::string, std::string>& metadata) {
  std::map<std::string, uint32_t> checksums;
  for (auto it = metadata.begin(); it != metadata.end();) {
    if (!is_checksum_key(it->first)) {
      ++it;
      continue;
    }
    const std::string tensor = it->first.substr(kChecksumPrefix.size());
    if (!parse_checksum(it->second, checksums[tensor]))
      fail_corrupt(path, fmt::format("the checksum of tensor '{}' is \"{}\", not 8 hex digits", tensor, it->second));
    it = metadata.erase(it);
  }
  return checksums;
}

bool parse_dtype(const std::string& text, DType& out) {
  for (DType d : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::U8, DType::I32})
    if (text == dtype_name(d)) {
      out = d;
      return true;
    }
  return false;
}

// Every dtype the safetensors format lists (its Dtype enum, safetensors 0.6) and the width of
// one element in bits: F4 and F6 pack elements across bytes.
struct FormatDtype {
  std::string_view name;
  unsigned bits;
};
constexpr FormatDtype kFormatDtypes[] = {
    {"BOOL", 8},     {"F4", 4},       {"F6_E2M3", 6}, {"F6_E3M2", 6}, {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8},
    {"F8_E4M3", 8},  {"F8_E8M0", 8},  {"I16", 16},    {"U16", 16},    {"F16", 16}, {"BF16", 16}, {"I32", 32},
    {"U32", 32},     {"F32", 32},     {"C64", 64},    {"F64", 64},    {"I64", 64}, {"U64", 64}};

const FormatDtype* format_dtype(const std::string& text) {
  for (const FormatDtype& d : kFormatDtypes)
    if (d.name == text) return &d;
  return nullptr;
}

std::string format_dtype_list() {
  std::string list;
  for (const FormatDtype& d : kFormatDtypes) list += list.empty() ? std::string(d.name) : fmt::format(", {}", d.name);
  return list;
}

enum class Bytes { Fit, Overflow, PartByte };

// numel(shape) elements of `bits` bits, in bytes, without overflow. A tensor of packed elements
// (F4, F6) must end on a byte, as the format requires.
Bytes packed_bytes(const Shape& shape, unsigned bits, uint64_t& out) {
  unsigned __int128 elements = 1;
  for (int64_t d : shape) {
    elements *= uint64_t(d);  // at most 2^64 * 2^63: no overflow of 128 bits
    if (elements > UINT64_MAX) return Bytes::Overflow;
  }
  const unsigned __int128 total = elements * bits;
  if (total % 8 != 0) return Bytes::PartByte;
  if (total / 8 > UINT64_MAX) return Bytes::Overflow;
  out = uint64_t(total / 8);
  return Bytes::Fit;
}

// numel(shape) * dtype size without overflow; false if it does not fit in 64 bits.
bool tensor_bytes(const Shape& shape, DType dtype, uint64_t& out) {
  return packed_bytes(shape, unsigned(dtype_size(dtype)) * 8, out) == Bytes::Fit;
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
  std::string skipped_dtype;  // a format dtype kiln has no DType for, read past; else empty
};

Entry parse_entry(const std::string& path, const std::string& name, const json& value, uint64_t data_bytes,
                  bool skip_unsupported) {
  auto bad = [&](const std::string& what) -> Entry {
    fail("safetensors file '{}': tensor '{}': {}", path, name, what);
  };
  if (!value.is_object()) return bad("entry is not a JSON object");
  Entry e{name, DType::F32, {}, 0, 0, {}};
  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) return bad("missing string field \"dtype\"");
  const std::string dtype_text = dtype->get<std::string>();
  const FormatDtype* format = format_dtype(dtype_text);
  if (!parse_dtype(dtype_text, e.dtype)) {
    if (!skip_unsupported)
      return bad(fmt::format("unsupported dtype \"{}\" (kiln reads F32, F64, F16, BF16, I32, U8)", dtype_text));
    if (!format)
      return bad(fmt::format("unknown dtype \"{}\": the safetensors format has {}", dtype_text, format_dtype_list()));
    e.skipped_dtype = dtype_text;
  }
  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) return bad("missing array field \"shape\"");
  for (const json& d : *shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
      return bad("shape " + shape->dump() + " has an entry that is not a non-negative integer");
    e.shape.push_back(d.get<int64_t>());
  }
  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
    return bad("\"data_offsets\" must be [begin, end] with non-negative integers");
  e.begin = (*offsets)[0].get<uint64_t>();
  e.end = (*offsets)[1].get<uint64_t>();
  if (e.begin > e.end) return bad(fmt::format("data_offsets [{}, {}] end before they begin", e.begin, e.end));
  if (e.end > data_bytes)
    return bad(fmt::format("data_offsets [{}, {}] run past the {} data bytes in the file (truncated?)",
                           e.begin, e.end, data_bytes));
  uint64_t expected = 0;
  const unsigned bits = format ? format->bits : unsigned(dtype_size(e.dtype)) * 8;
  const Bytes fit = packed_bytes(e.shape, bits, expected);
  if (fit == Bytes::PartByte)
    return bad(fmt::format("shape {} of {} ends inside a byte ({}-bit elements); the format needs whole bytes",
                           shape_str(e.shape), dtype_text, bits));
  if (fit == Bytes::Overflow || expected != e.end - e.begin)
    return bad(fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                           shape_str(e.shape), dtype_text, expected, e.begin, e.end, e.end - e.begin));
  return e;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& value) {
  if (!value.is_object()) fail("safetensors file '{}': \"{}\" is not a JSON object", path, kMetadataKey);
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string())
      fail("safetensors file '{}': metadata value of '{}' is not a string: {}", path, key, v.dump());
    metadata[key] = v.get<std::string>();
  }
  return metadata;
}

// Entries sorted by offset must tile the data region exactly, as the format requires.
void check_layout(const std::string& path, std::vector<Entry>& entries, uint64_t data_bytes) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < at)
      fail("safetensors file '{}': tensor '{}' (bytes {}..{}) overlaps tensor '{}' (bytes ..{})",
           path, e.name, e.begin, e.end, previous->name, at);
    if (e.begin > at)
      fail("safetensors file '{}': {} unindexed bytes before tensor '{}' (data_offsets start at {}, "
           "expected {})", path, e.begin - at, e.name, e.begin, at);
    at = e.end;
    previous = &e;
  }
  if (at != data_bytes)
    fail("safetensors file '{}': {} bytes after the last tensor are not described by the header",
         path, data_bytes - at);
}

}  // namespace

const NamedTensor* SafetensorsFile::find(const std::string& name) const {
  for (const NamedTensor& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  ordered_json meta = ordered_json::object();
  for (const auto& [key, value] : metadata)
    if (!is_checksum_key(key)) meta[key] = value;  // stale ones would fail the next load
  std::set<std::string> names;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey)
      fail("save_safetensors('{}'): invalid tensor name '{}'", path, t.name);
    if (!names.insert(t.name).second)
      fail("save_safetensors('{}'): tensor name '{}' appears twice", path, t.name);
    for (int64_t d : t.shape)
      if (d < 0) fail("save_safetensors('{}'): tensor '{}' has negative shape {}", path, t.name, shape_str(t.shape));
    uint64_t bytes = 0;
    if (!tensor_bytes(t.shape, t.dtype, bytes) || bytes != t.data.size())
      fail("save_safetensors('{}'): tensor '{}' has shape {} of {} ({} bytes) but {} data bytes",
           path, t.name, shape_str(t.shape), dtype_name(t.dtype), bytes, t.data.size());
    meta[std::string(kChecksumPrefix) + t.name] = checksum_text(checksum(t.data));
  }
  ordered_json header = ordered_json::object();
  if (!meta.empty()) header[kMetadataKey] = std::move(meta);
  uint64_t offset = 0;
  for (const NamedTensor& t : tensors) {
    const uint64_t bytes = t.data.size();  // checked above
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned
  std::byte length[8];
  for (int i = 0; i < 8; ++i) length[i] = std::byte(uint64_t(text.size()) >> (8 * i));

  std::vector<std::span<const std::byte>> chunks{std::span<const std::byte>(length, 8),
                                                 std::as_bytes(std::span(text))};
  for (const NamedTensor& t : tensors) chunks.emplace_back(t.data);
  write_file_atomic(path, chunks);
}

const SkippedTensor* SafetensorsFile::find_skipped(const std::string& name) const {
  for (const SkippedTensor& t : skipped)
    if (t.name == name) return &t;
  return nullptr;
}

SafetensorsFile load_safetensors(const std::string& path, const SafetensorsReadOptions& options) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    fail("checkpoint '{}' does not exist or is not a regular file", path);
  const uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) fail("cannot stat checkpoint '{}': {}", path, ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open checkpoint '{}': {}", path, std::strerror(errno));
  if (file_bytes < 8) fail("safetensors file '{}' is truncated: {} bytes, shorter than the 8-byte header length", path, file_bytes);

  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= uint64_t(length[i]) << (8 * i);
  if (header_bytes == 0 || header_bytes > kMaxHeaderBytes)
    fail("safetensors file '{}' has an implausible header length {} (not a safetensors file?)", path, header_bytes);
  if (header_bytes > file_bytes - 8)
    fail("safetensors file '{}' is truncated: header length {} but only {} bytes follow", path,
         header_bytes, file_bytes - 8);
  std::string text(header_bytes, '\0');
  if (!in.read(text.data(), std::streamsize(header_bytes))) fail("error reading the header of '{}'", path);

  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {  // a syntax error, or a number past double's range (1e999)
    fail("safetensors file '{}' has a malformed JSON header: {}", path, e.what());
  }
  if (!header.is_object()) fail("safetensors file '{}': the header is not a JSON object", path);

  const uint64_t data_start = 8 + header_bytes, data_bytes = file_bytes - data_start;
  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == kMetadataKey) file.metadata = parse_metadata(path, value);
    else entries.push_back(parse_entry(path, key, value, data_bytes, options.skip_unsupported_dtypes));
  }
  check_layout(path, entries, data_bytes);
  const std::map<std::string, uint32_t> checksums = take_checksums(path, file.metadata);
  std::set<std::string> names;
  for (const Entry& e : entries) names.insert(e.name);
  for (const auto& [name, crc] : checksums)
    if (!names.count(name))
      fail_corrupt(path,
                   fmt::format("its metadata holds a checksum of tensor '{}', which the file does not have", name));

  for (const Entry& e : entries) {
    const auto crc = checksums.find(e.name);
    // A skipped tensor's bytes are read only to verify a checksum (kiln writes none for one).
    const bool skipped = !e.skipped_dtype.empty();
    if (skipped && crc == checksums.end()) {
      file.skipped.push_back({e.name, e.skipped_dtype, e.shape});
      continue;
    }
    NamedTensor t{e.name, e.dtype, e.shape, std::vector<std::byte>(e.end - e.begin)};
    in.seekg(std::streamoff(data_start + e.begin));
    if (!t.data.empty() && !in.read(reinterpret_cast<char*>(t.data.data()), std::streamsize(t.data.size())))
      fail("safetensors file '{}': error reading tensor '{}'", path, e.name);
    // No checksum (older kiln, other writers): nothing to verify.
    if (crc != checksums.end() && checksum(t.data) != crc->second)
      fail_corrupt(path, fmt::format("tensor '{}' does not match the checksum written with it", e.name));
    if (skipped) file.skipped.push_back({e.name, e.skipped_dtype, e.shape});
    else file.tensors.push_back(std::move(t));
  }
  return file;
}

}  // namespace kiln

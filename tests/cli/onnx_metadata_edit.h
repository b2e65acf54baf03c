#pragma once
// An ONNX file's metadata_props read and rewritten by the CLI tests, which do not link the ONNX
// library: a ModelProto is a protobuf message whose field 14 (repeated StringStringEntryProto, key
// 1 and value 2) holds them, so its top-level fields are walked, those entries dropped and new ones
// appended; every other byte of the file stays as it was.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "support/temp_dir.h"

namespace kiln::testing {

constexpr uint64_t kMetadataPropsField = 14;

inline uint64_t read_varint(const std::vector<uint8_t>& b, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0; at < b.size(); shift += 7) {
    const uint8_t byte = b[at++];
    v |= uint64_t(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return v;
  }
  ADD_FAILURE() << "a varint runs past the end of the message";
  return v;
}

inline void write_varint(std::vector<uint8_t>& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(uint8_t(v | 0x80));
  out.push_back(uint8_t(v));
}

inline void write_text_field(std::vector<uint8_t>& out, uint64_t field, const std::string& text) {
  write_varint(out, field << 3 | 2);
  write_varint(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
}

// One top-level field of a message: its number, wire type and bytes [begin, end), payload from `payload`.
struct ProtoField {
  uint64_t number = 0, wire = 0;
  size_t begin = 0, payload = 0, end = 0;
};

inline std::vector<ProtoField> top_level_fields(const std::vector<uint8_t>& b) {
  std::vector<ProtoField> fields;
  size_t at = 0;
  while (at < b.size()) {
    ProtoField f;
    f.begin = at;
    const uint64_t tag = read_varint(b, at);
    f.number = tag >> 3, f.wire = tag & 7;
    if (f.wire == 0) {
      f.payload = at;
      read_varint(b, at);
    } else if (f.wire == 2) {
      const uint64_t n = read_varint(b, at);
      f.payload = at;
      at += n;
    } else if (f.wire == 1 || f.wire == 5) {
      f.payload = at;
      at += f.wire == 1 ? 8 : 4;
    } else {
      ADD_FAILURE() << "wire type " << f.wire << " at byte " << f.begin;
      return fields;
    }
    f.end = at;
    fields.push_back(f);
  }
  return fields;
}

// The metadata_props of the ONNX file at `path`.
inline std::map<std::string, std::string> onnx_metadata(const std::string& path) {
  const std::vector<uint8_t> b = read_bytes(path);
  std::map<std::string, std::string> metadata;
  for (const ProtoField& f : top_level_fields(b)) {
    if (f.number != kMetadataPropsField || f.wire != 2) continue;
    const std::vector<uint8_t> entry(b.begin() + std::ptrdiff_t(f.payload), b.begin() + std::ptrdiff_t(f.end));
    std::string key, value;
    for (const ProtoField& e : top_level_fields(entry)) {
      const std::string text(entry.begin() + std::ptrdiff_t(e.payload), entry.begin() + std::ptrdiff_t(e.end));
      if (e.number == 1) key = text;
      if (e.number == 2) value = text;
    }
    metadata[key] = value;
  }
  return metadata;
}

// The ONNX file `from` written to `to` with `metadata` as its metadata_props, nothing else changed.
inline void write_with_metadata(const std::string& from, const std::string& to,
                                const std::map<std::string, std::string>& metadata) {
  const std::vector<uint8_t> b = read_bytes(from);
  std::vector<uint8_t> out;
  for (const ProtoField& f : top_level_fields(b))
    if (f.number != kMetadataPropsField)
      out.insert(out.end(), b.begin() + std::ptrdiff_t(f.begin), b.begin() + std::ptrdiff_t(f.end));
  for (const auto& [key, value] : metadata) {
    std::vector<uint8_t> entry;
    write_text_field(entry, 1, key);
    write_text_field(entry, 2, value);
    write_text_field(out, kMetadataPropsField, std::string(entry.begin(), entry.end()));
  }
  write_bytes(to, out);
}

}  // namespace kiln::testing

#include "formats/proto_wire.h"

#include <cstring>

namespace kiln::proto {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_key(std::string& out, int field, WireType type) { put_varint(out, (uint64_t(field) << 3) | type); }

template <class T>
void put_little_endian(std::string& out, T bits) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(char((bits >> (8 * i)) & 0xFF));
}

}  // namespace

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(char((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(char(value));
}

void put_int64(std::string& out, int field, int64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, uint64_t(value));
}

void put_double(std::string& out, int field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_little_endian(out, bits);
}

void put_float(std::string& out, int field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_little_endian(out, bits);
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

}  // namespace kiln::proto

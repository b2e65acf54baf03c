#pragma once
// The few pieces of the protobuf wire format that TensorBoard's event files need, written by hand
// (kiln has no protobuf dependency): a message is a string of fields, each a key (field number << 3 |
// wire type) as a varint, then the value: a varint, 8 or 4 little-endian bytes, or a varint length
// and that many bytes (strings and nested messages).
#include <cstdint>
#include <string>

namespace kiln::proto {

// Appends `value` as a base-128 varint (7 bits a byte, low first, the high bit set on all but the last).
void put_varint(std::string& out, uint64_t value);

// Fields, appended to `out`. A negative int64 is its two's complement, as protobuf's int64 (10 bytes).
void put_int64(std::string& out, int field, int64_t value);      // wire type 0 (varint)
void put_double(std::string& out, int field, double value);     // wire type 1 (fixed64)
void put_float(std::string& out, int field, float value);       // wire type 5 (fixed32)
void put_bytes(std::string& out, int field, const std::string& bytes);  // wire type 2: strings, messages

}  // namespace kiln::proto

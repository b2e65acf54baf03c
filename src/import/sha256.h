#pragma once
// SHA-256 (FIPS 180-4) of a byte string, as lowercase hex: what an imported ONNX file's contents
// are known by (ImportedModel::sha256), so a run can tell the file it started from from another
// of the same name. kiln has no other cryptographic hash (its CRCs catch damage, not a swapped file).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kiln {

// sha256_hex("abc") = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".
std::string sha256_hex(std::span<const uint8_t> bytes);

}  // namespace kiln

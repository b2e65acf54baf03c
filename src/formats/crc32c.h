#pragma once
// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, as iSCSI, ext4 and TFRecord files use it),
// and TFRecord's masked form of it. zlib's crc32 is another polynomial.
#include <cstddef>
#include <cstdint>

namespace kiln {

// The CRC-32C of `size` bytes, continuing from `crc` (0 to start): crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// TFRecord stores each CRC masked, so that a CRC of data holding CRCs does not come out trivial:
// rotated right by 15 bits plus 0xa282ead8.
inline uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace kiln

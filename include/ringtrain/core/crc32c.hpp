// CRC-32C (Castagnoli polynomial, reflected 0x82F63B78), the checksum of iSCSI, ext4 metadata, LevelDB and
// TFRecord. Checkpoints use it over the header and every tensor. Chosen over zlib's crc32: the Castagnoli
// polynomial detects more error patterns at checkpoint-sized lengths for the same cost, and core stays free of
// link dependencies (it is also what the issue asked for by name).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ringtrain {

// The CRC-32C of `bytes` continued from `crc` (the value returned for the bytes before them; 0 to start), so a
// long stream can be checksummed in pieces: crc32c(b, crc32c(a)) == crc32c(a followed by b).
uint32_t crc32c(std::span<const std::byte> bytes, uint32_t crc = 0);

}  // namespace ringtrain

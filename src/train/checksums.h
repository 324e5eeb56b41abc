// Checksums of a checkpoint's files: checksums.json lists each file's size and CRC-32C, written
// after the files and verified before a resume or an evaluation reads them, so that a file that
// changed after its save (a flipped bit, a NaN written into the weights, a truncated copy) is
// refused by name instead of resumed silently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace headroom {

inline constexpr const char* kChecksumsFile = "checksums.json";

// CRC-32C (Castagnoli, as iSCSI, ext4 and TFRecord use it) of `size` bytes, continuing
// `previous` (the CRC of the bytes before them; 0 to start). Computed by Intel's ISA-L (Debian's
// libisal-dev), which uses the CPU's crc32 instruction where it has one.
uint32_t crc32c(const void* data, size_t size, uint32_t previous = 0);

// A CRC as checksums.json writes it: 8 lowercase hex digits.
std::string crc32c_hex(uint32_t crc);

// The CRC-32C of a whole file; headroom::Error naming the file when it cannot be read.
uint32_t file_crc32c(const std::string& path);

// Writes dir/checksums.json (atomically): {"algorithm": "crc32c", "files": {name: {"bytes": N,
// "crc32c": "8 hex digits"}}} for every regular file directly in `dir` but itself.
void write_checkpoint_checksums(const std::string& dir);

// Verifies every file dir/checksums.json lists: present, of its size and CRC. ValueError naming
// the file at fault (or checksums.json when it is malformed). Returns false, verifying nothing,
// when `dir` has no checksums.json (a checkpoint written before headroom kept checksums).
bool verify_checkpoint_checksums(const std::string& dir);

}  // namespace headroom

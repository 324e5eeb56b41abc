// CRC-32C of checkpoint files and the checksums.json that records them.
#include "train/checksums.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/json_file.h"

namespace headroom {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli's, bit-reversed

// tables[k][b]: the CRC of byte b followed by k zero bytes (slicing-by-8).
const std::array<std::array<uint32_t, 256>, 8>& crc_tables() {
  static const auto tables = [] {
    std::array<std::array<uint32_t, 256>, 8> t{};
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t crc = b;
      for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
      t[0][b] = crc;
    }
    for (uint32_t b = 0; b < 256; ++b) {
      for (size_t k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFFu];
    }
    return t;
  }();
  return tables;
}

// The register form (no pre/post inversion) over `size` bytes.
uint32_t crc_tables_update(uint32_t crc, const unsigned char* p, size_t size) {
  const auto& t = crc_tables();
  while (size >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    word ^= crc;  // little-endian: the CRC meets the first four bytes
    crc = t[7][word & 0xFF] ^ t[6][(word >> 8) & 0xFF] ^ t[5][(word >> 16) & 0xFF] ^
          t[4][(word >> 24) & 0xFF] ^ t[3][(word >> 32) & 0xFF] ^ t[2][(word >> 40) & 0xFF] ^
          t[1][(word >> 48) & 0xFF] ^ t[0][word >> 56];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFFu];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc_sse42_update(uint32_t crc, const unsigned char* p,
                                                             size_t size) {
  uint64_t crc64 = crc;
  while (size >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc64 = _mm_crc32_u64(crc64, word);
    p += 8;
    size -= 8;
  }
  crc = static_cast<uint32_t>(crc64);
  while (size-- > 0) crc = _mm_crc32_u8(crc, *p++);
  return crc;
}

bool has_sse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

std::string hex8(uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t previous) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t crc = ~previous;
#if defined(__x86_64__)
  if (has_sse42()) return ~crc_sse42_update(crc, p, size);
#endif
  return ~crc_tables_update(crc, p, size);
}

uint32_t file_crc32c(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(str_cat(path, ": cannot open it to compute its checksum"));
  std::vector<char> buffer(size_t{1} << 20);
  uint32_t crc = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    crc = crc32c(buffer.data(), static_cast<size_t>(in.gcount()), crc);
  }
  if (in.bad()) throw Error(str_cat(path, ": read error while computing its checksum"));
  return crc;
}

void write_checkpoint_checksums(const std::string& dir) {
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  std::vector<fs::path> paths;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().filename() != kChecksumsFile) {
      paths.push_back(entry.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  for (const fs::path& path : paths) {
    files[path.filename().string()] = {{"bytes", fs::file_size(path)},
                                       {"crc32c", hex8(file_crc32c(path.string()))}};
  }
  const nlohmann::ordered_json manifest = {{"algorithm", "crc32c"}, {"files", files}};
  write_file_atomically((fs::path(dir) / kChecksumsFile).string(), manifest.dump(2) + "\n");
}

bool verify_checkpoint_checksums(const std::string& dir) {
  const fs::path manifest_path = fs::path(dir) / kChecksumsFile;
  if (!fs::exists(manifest_path)) return false;
  const std::string manifest_name = manifest_path.string();
  const nlohmann::json manifest = parse_json(read_text_file(manifest_name), manifest_name);
  if (!manifest.is_object() || manifest.value("algorithm", nlohmann::json()) != "crc32c" ||
      !manifest.contains("files") || !manifest["files"].is_object()) {
    throw ValueError(str_cat(manifest_name,
                             ": expected {\"algorithm\": \"crc32c\", \"files\": {...}}"));
  }
  for (const auto& [name, entry] : manifest["files"].items()) {
    const fs::path path = fs::path(dir) / name;
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      throw ValueError(str_cat(manifest_name, ": '", name, "' is not a file name"));
    }
    if (!entry.is_object() || !entry.contains("bytes") || !entry["bytes"].is_number_unsigned() ||
        !entry.contains("crc32c") || !entry["crc32c"].is_string()) {
      throw ValueError(str_cat(manifest_name, ": the entry of '", name,
                               "' needs an integer \"bytes\" and a \"crc32c\" string"));
    }
    if (!fs::is_regular_file(path)) {
      throw ValueError(str_cat(path.string(), ": listed in ", kChecksumsFile, " but missing"));
    }
    const uint64_t bytes = entry["bytes"].get<uint64_t>();
    if (fs::file_size(path) != bytes) {
      throw ValueError(str_cat(path.string(), ": ", fs::file_size(path), " bytes, ", bytes,
                               " when it was saved (", kChecksumsFile, "): the file changed"));
    }
    const std::string actual = hex8(file_crc32c(path.string()));
    if (actual != entry["crc32c"].get<std::string>()) {
      throw ValueError(str_cat(path.string(), ": CRC-32C ", actual, ", ",
                               entry["crc32c"].get<std::string>(), " when it was saved (",
                               kChecksumsFile, "): the file changed after it was written"));
    }
  }
  return true;
}

}  // namespace headroom

// CRC-32C of checkpoint files and the checksums.json that records them.
#include "train/checksums.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include <isa-l/crc.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_file.h"

namespace headroom {

namespace fs = std::filesystem;

uint32_t crc32c(const void* data, size_t size, uint32_t previous) {
  // ISA-L's crc32_iscsi works on the CRC register, without the standard's inversions, and takes
  // an int length: larger buffers go in pieces. It only reads the bytes (its pointer is not const).
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));
  uint32_t crc = ~previous;
  constexpr size_t kPiece = size_t{1} << 30;
  while (size > 0) {
    const size_t piece = std::min(size, kPiece);
    crc = crc32_iscsi(p, static_cast<int>(piece), crc);
    p += piece;
    size -= piece;
  }
  return ~crc;
}

std::string crc32c_hex(uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
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
                                       {"crc32c", crc32c_hex(file_crc32c(path.string()))}};
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
    throw ValueError(
        str_cat(manifest_name, ": expected {\"algorithm\": \"crc32c\", \"files\": {...}}"));
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
    const std::string actual = crc32c_hex(file_crc32c(path.string()));
    if (actual != entry["crc32c"].get<std::string>()) {
      throw ValueError(str_cat(path.string(), ": CRC-32C ", actual, ", ",
                               entry["crc32c"].get<std::string>(), " when it was saved (",
                               kChecksumsFile, "): the file changed after it was written"));
    }
  }
  return true;
}

}  // namespace headroom

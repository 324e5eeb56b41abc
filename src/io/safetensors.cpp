// safetensors reading (mmap + full header validation), writing, and sharded checkpoints.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <regex>
#include <string_view>
#include <system_error>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_file.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// safetensors stores little-endian data and headroom copies it byte for byte.
static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host would need byte swapping");

// The reference implementation's MAX_HEADER_SIZE.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Every headroom dtype under its safetensors name.
constexpr std::pair<std::string_view, DType> kSafetensorsDTypes[] = {
    {"F32", DType::f32},           {"F16", DType::f16},         {"BF16", DType::bf16},
    {"F8_E4M3", DType::f8_e4m3fn}, {"F8_E5M2", DType::f8_e5m2}, {"I32", DType::i32},
    {"I64", DType::i64},           {"U8", DType::u8},           {"BOOL", DType::boolean},
};
static_assert(std::size(kSafetensorsDTypes) == kNumDTypes, "every DType needs a safetensors name");

// Valid safetensors dtypes that have no headroom DType; recognised so the error can say so.
constexpr std::string_view kUnsupportedDTypes[] = {
    "F64", "I8", "I16", "U16", "U32", "U64", "C64", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",
};

const char* safetensors_dtype_name(DType dtype) {
  for (const auto& [name, d] : kSafetensorsDTypes) {
    if (d == dtype) return name.data();
  }
  return "?";  // unreachable: the static_assert above keeps the table complete
}

std::string supported_dtype_list() {
  std::string list;
  for (const auto& [name, d] : kSafetensorsDTypes) list += str_cat(list.empty() ? "" : ", ", name);
  return list;
}

std::string offsets_text(size_t begin, size_t end) { return str_cat("[", begin, ", ", end, "]"); }

[[noreturn]] void fail_no_tensor(const std::string& path, const std::string& name, size_t count) {
  throw ValueError(str_cat(path, ": no tensor '", name, "' (it holds ", count,
                           count == 1 ? " tensor)" : " tensors)"));
}

// Parses one header entry; `where` is "<path>: tensor '<name>'". `data_size` is the length
// of the data buffer the offsets must stay within.
SafetensorsTensorInfo parse_entry(const json& entry, const std::string& where, size_t data_size) {
  if (!entry.is_object()) {
    throw ValueError(str_cat(where, ": entry is ", describe_json(entry),
                             ", not an object with dtype, shape and data_offsets"));
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(field)) throw ValueError(str_cat(where, ": entry has no '", field, "'"));
  }
  SafetensorsTensorInfo info;

  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) {
    throw ValueError(str_cat(where, ": dtype is ", describe_json(dtype), ", not a string"));
  }
  const std::string& dtype_text = dtype.get_ref<const std::string&>();
  const auto known = std::find_if(std::begin(kSafetensorsDTypes), std::end(kSafetensorsDTypes),
                                  [&](const auto& row) { return row.first == dtype_text; });
  if (known == std::end(kSafetensorsDTypes)) {
    const bool recognised = std::find(std::begin(kUnsupportedDTypes), std::end(kUnsupportedDTypes),
                                      dtype_text) != std::end(kUnsupportedDTypes);
    throw ValueError(str_cat(where, ": ", recognised ? "dtype '" : "unknown dtype '", dtype_text,
                             recognised ? "' is not supported by headroom" : "'",
                             " (supported: ", supported_dtype_list(), ")"));
  }
  info.dtype = known->second;

  const json& shape = entry["shape"];
  if (!shape.is_array()) {
    throw ValueError(str_cat(where, ": shape is ", describe_json(shape), ", not an array"));
  }
  uint64_t numel = 1;
  int64_t strides_product = 1;  // of the dims > 1: a zero dim leaves numel 0, not the strides
  for (size_t i = 0; i < shape.size(); ++i) {
    const json& dim = shape[i];
    if (!dim.is_number_unsigned()) {
      throw ValueError(str_cat(where, ": shape dimension ", i, " is ", describe_json(dim),
                               "; dimensions are non-negative integers"));
    }
    const uint64_t d = dim.get<uint64_t>();
    if (d > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, d, &numel)) {
      throw ValueError(
          str_cat(where, ": shape dimension ", i, " (", d, ") takes the element count past 2^64"));
    }
    info.shape.push_back(static_cast<int64_t>(d));
    if (d > 1 &&
        __builtin_mul_overflow(strides_product, static_cast<int64_t>(d), &strides_product)) {
      throw ValueError(str_cat(where, ": shape ", info.shape,
                               " has strides past 2^63 (the product of its non-zero dims)"));
    }
  }
  uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(numel, dtype_size(info.dtype), &expected_bytes)) {
    throw ValueError(
        str_cat(where, ": shape ", info.shape, " of ", dtype_text, " needs more than 2^64 bytes"));
  }

  const json& offsets = entry["data_offsets"];
  const auto is_offset = [](const json& v) { return v.is_number_unsigned(); };
  if (!offsets.is_array() || offsets.size() != 2 || !is_offset(offsets[0]) ||
      !is_offset(offsets[1])) {
    throw ValueError(str_cat(where, ": data_offsets is ", describe_json(offsets),
                             ", not [begin, end] with non-negative integers"));
  }
  const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
  if (begin > end) {
    throw ValueError(
        str_cat(where, ": data_offsets ", offsets_text(begin, end), " begin past end"));
  }
  if (end > data_size) {
    throw ValueError(str_cat(where, ": data_offsets ", offsets_text(begin, end),
                             " end past the data buffer of ", data_size, " bytes"));
  }
  if (end - begin != expected_bytes) {
    throw ValueError(str_cat(where, ": data_offsets ", offsets_text(begin, end), " hold ",
                             end - begin, " bytes, but shape ", info.shape, " of ", dtype_text,
                             " needs ", expected_bytes, " bytes"));
  }
  info.offset = begin;
  info.nbytes = end - begin;
  return info;
}

uint64_t read_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void append_u64_le(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw ValueError(str_cat("cannot open '", path, "': ", std::generic_category().message(err)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ValueError(str_cat("cannot open '", path, "': not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw ValueError(
        str_cat(path, ": the file is ", size, " bytes, shorter than the 8-byte header length"));
  }
  void* addr = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (addr == MAP_FAILED) {
    throw ValueError(str_cat("cannot map '", path, "': ", std::generic_category().message(err)));
  }
  mapping_ = static_cast<const unsigned char*>(addr);
  mapping_size_ = size;
  try {
    parse_header();
  } catch (...) {
    unmap();
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_size_(std::exchange(other.mapping_size_, 0)),
      data_start_(other.data_start_),
      names_(std::move(other.names_)),
      infos_(std::move(other.infos_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    data_start_ = other.data_start_;
    names_ = std::move(other.names_);
    infos_ = std::move(other.infos_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

void SafetensorsFile::unmap() noexcept {
  if (mapping_ != nullptr) ::munmap(const_cast<unsigned char*>(mapping_), mapping_size_);
  mapping_ = nullptr;
  mapping_size_ = 0;
}

void SafetensorsFile::parse_header() {
  const uint64_t header_bytes = read_u64_le(mapping_);
  if (header_bytes > kMaxHeaderBytes) {
    throw ValueError(str_cat(path_, ": header length ", header_bytes,
                             " exceeds safetensors' limit of ", kMaxHeaderBytes, " bytes"));
  }
  if (header_bytes > mapping_size_ - 8) {
    throw ValueError(str_cat(path_, ": header length ", header_bytes,
                             " runs past the end of the file (", mapping_size_, " bytes)"));
  }
  data_start_ = 8 + header_bytes;
  const size_t data_size = mapping_size_ - data_start_;
  const json header = parse_json(
      std::string_view(reinterpret_cast<const char*>(mapping_ + 8), header_bytes), path_);
  if (!header.is_object()) {
    throw ValueError(str_cat(path_, ": header is ", describe_json(header), ", not an object"));
  }

  std::vector<std::pair<std::string, SafetensorsTensorInfo>> entries;
  entries.reserve(header.size());
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) {
        throw ValueError(str_cat(path_, ": __metadata__ is ", describe_json(value),
                                 ", not an object of strings"));
      }
      for (const auto& [field, text] : value.items()) {
        if (!text.is_string()) {
          throw ValueError(str_cat(path_, ": __metadata__ field '", field, "' is ",
                                   describe_json(text), ", not a string"));
        }
        metadata_[field] = text.get<std::string>();
      }
      continue;
    }
    entries.emplace_back(key,
                         parse_entry(value, str_cat(path_, ": tensor '", key, "'"), data_size));
  }

  // The tensors must tile the data buffer exactly: sorted by offsets, each begins where the
  // previous ended and the last ends at the end of the file (the reference's validate()).
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second.offset, a.second.offset + a.second.nbytes) <
           std::pair(b.second.offset, b.second.offset + b.second.nbytes);
  });
  size_t covered = 0;
  for (const auto& [name, info] : entries) {
    if (info.offset < covered) {
      const SafetensorsTensorInfo& p = infos_.at(names_.back());
      throw ValueError(str_cat(path_, ": tensor '", name, "': data_offsets ",
                               offsets_text(info.offset, info.offset + info.nbytes),
                               " overlap tensor '", names_.back(), "' at ",
                               offsets_text(p.offset, p.offset + p.nbytes)));
    }
    if (info.offset > covered) {
      throw ValueError(str_cat(path_, ": tensor '", name, "': data_offsets ",
                               offsets_text(info.offset, info.offset + info.nbytes),
                               " leave bytes [", covered, ", ", info.offset,
                               ") of the data buffer to no tensor",
                               names_.empty() ? "" : str_cat(" (after '", names_.back(), "')"),
                               "; safetensors files have no holes"));
    }
    covered = info.offset + info.nbytes;
    infos_.emplace(name, info);
    names_.push_back(name);
  }
  if (covered != data_size) {
    const std::string last =
        names_.empty() ? "" : str_cat(" (the last, '", names_.back(), "', ends there)");
    throw ValueError(str_cat(path_, ": the data buffer holds ", data_size,
                             " bytes but the tensors cover only ", covered, last,
                             "; safetensors files have no trailing bytes"));
  }
}

const SafetensorsTensorInfo& SafetensorsFile::info(const std::string& name) const {
  const auto it = infos_.find(name);
  if (it == infos_.end()) fail_no_tensor(path_, name, names_.size());
  return it->second;
}

const void* SafetensorsFile::data(const std::string& name) const {
  return mapping_ + data_start_ + info(name).offset;
}

Tensor SafetensorsFile::load(const std::string& name, Device device) const {
  const SafetensorsTensorInfo& i = info(name);
  if (device.is_meta()) return Tensor::empty(i.shape, i.dtype, kMeta);
  Tensor host = Tensor::empty(i.shape, i.dtype, kCPU);
  if (i.nbytes > 0) std::memcpy(host.data_ptr(), data(name), i.nbytes);
  return device.is_cpu() ? host : host.to(device);
}

void SafetensorsFile::copy_into(const std::string& name, const Tensor& dst) const {
  const SafetensorsTensorInfo& i = info(name);
  const std::string where = str_cat(path_, ": tensor '", name, "'");
  if (!dst.defined()) throw ValueError(str_cat(where, ": the destination tensor is undefined"));
  if (dst.shape() != i.shape) {
    throw ValueError(
        str_cat(where, ": shape ", i.shape, " in the file, but the destination is ", dst.shape()));
  }
  if (dst.dtype() != i.dtype) {
    const bool convertible =
        (i.dtype == DType::f32 || i.dtype == DType::f16 || i.dtype == DType::bf16) &&
        is_floating(dst.dtype());
    if (!convertible) {
      throw ValueError(str_cat(where, ": dtype ", safetensors_dtype_name(i.dtype),
                               " in the file, but the destination holds ", dtype_name(dst.dtype()),
                               " (only F32, F16 and BF16 convert, to floating dtypes)"));
    }
  }
  if (dst.device().is_meta()) return;  // nothing to write, as Tensor::copy_
  if (dst.device().is_cpu() && dst.dtype() == i.dtype && dst.is_contiguous()) {
    if (i.nbytes > 0) std::memcpy(dst.data_ptr(), data(name), i.nbytes);
    return;
  }
  dst.copy_(load(name, kCPU));
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = str_cat("save_safetensors '", path, "'");
  // ordered_json keeps __metadata__ first and the entries in the order of their bytes.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::unordered_set<std::string_view> seen;
  size_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__") {
      throw ValueError(str_cat(where, ": '__metadata__' is reserved and cannot name a tensor"));
    }
    if (!seen.insert(name).second) {
      throw ValueError(str_cat(where, ": tensor name '", name, "' appears twice"));
    }
    if (!tensor.defined()) throw ValueError(str_cat(where, ": tensor '", name, "' is undefined"));
    if (tensor.device().is_meta()) {
      throw ValueError(str_cat(where, ": tensor '", name, "' is on meta and has no data"));
    }
    header[name] = {{"dtype", safetensors_dtype_name(tensor.dtype())},
                    {"shape", tensor.shape().to_vector()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(str_cat(where, ": a tensor name or metadata string is not valid UTF-8"));
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::string bytes;
  bytes.reserve(8 + header_text.size() + offset);
  append_u64_le(bytes, header_text.size());
  bytes += header_text;
  for (const auto& [name, tensor] : tensors) {
    const Tensor host = tensor.to(kCPU).contiguous();
    bytes.append(static_cast<const char*>(host.data_ptr()), host.nbytes());
  }
  write_file_atomically(path, bytes);
}

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    throw ValueError(str_cat("cannot open checkpoint '", path, "': no such file or directory"));
  }
  if (fs::is_directory(status)) {
    const fs::path single = fs::path(path) / kSafetensorsWeightsName;
    const fs::path index = fs::path(path) / kSafetensorsIndexName;
    if (fs::exists(single)) {
      path_ = single.string();
    } else if (fs::exists(index)) {
      open_index(index.string());
      return;
    } else {
      throw ValueError(str_cat("cannot open checkpoint '", path, "': the directory holds neither ",
                               kSafetensorsWeightsName, " nor ", kSafetensorsIndexName));
    }
  } else if (fs::path(path).extension() == ".json") {
    open_index(path);
    return;
  } else {
    path_ = path;
  }
  files_.emplace_back(path_);
  names_ = files_.front().names();
  for (const std::string& name : names_) file_of_.emplace(name, 0);
}

void SafetensorsCheckpoint::open_index(const std::string& index_path) {
  path_ = index_path;
  sharded_ = true;
  const json index = parse_json(read_text_file(index_path), index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw ValueError(str_cat(index_path,
                             ": an index needs an object 'weight_map' of tensor name "
                             "to shard file"));
  }
  // weight_map, grouped by shard; std::map orders the shards by file name.
  std::map<std::string, std::vector<std::string>> shards;
  std::unordered_map<std::string, std::string> shard_of;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) {
      throw ValueError(str_cat(index_path, ": weight_map maps tensor '", name, "' to ",
                               describe_json(shard), ", not a file name"));
    }
    const std::string& file = shard.get_ref<const std::string&>();
    // Shards live beside the index; refusing other places keeps a downloaded index from
    // pointing at arbitrary files.
    const fs::path relative(file);
    if (file.empty() || relative.is_absolute() ||
        std::find(relative.begin(), relative.end(), "..") != relative.end()) {
      throw ValueError(str_cat(index_path, ": weight_map maps tensor '", name, "' to '", file,
                               "', which is not a file beside the index"));
    }
    shards[file].push_back(name);
    shard_of.emplace(name, file);
  }

  const fs::path dir = fs::path(index_path).parent_path();
  for (const auto& [file, listed] : shards) {
    const fs::path shard_path = dir / file;
    // The error_code form: a name the file system refuses (too long, say) is this file's error,
    // not std::filesystem's exception.
    std::error_code ec;
    if (!fs::exists(shard_path, ec)) {
      throw ValueError(str_cat(
          index_path, ": shard '", shortened(file), "' (holding '", shortened(listed.front()), "'",
          listed.size() > 1 ? str_cat(" and ", listed.size() - 1, " more") : "", ") does not exist",
          ec ? str_cat(" (", ec.message(), ")") : std::string()));
    }
    SafetensorsFile shard(shard_path.string());
    for (const std::string& name : listed) {
      if (!shard.contains(name)) {
        throw ValueError(str_cat(index_path, ": tensor '", name, "' is mapped to shard '", file,
                                 "', which does not hold it"));
      }
    }
    for (const std::string& name : shard.names()) {
      const auto it = shard_of.find(name);
      if (it == shard_of.end()) {
        throw ValueError(str_cat(index_path, ": shard '", file, "' holds tensor '", name,
                                 "', which the index does not list"));
      }
      if (it->second != file) {
        throw ValueError(str_cat(index_path, ": shard '", file, "' holds tensor '", name,
                                 "', which the index maps to shard '", it->second, "'"));
      }
      file_of_.emplace(name, files_.size());
      names_.push_back(name);
    }
    files_.push_back(std::move(shard));
  }
}

const SafetensorsFile& SafetensorsCheckpoint::file_of(const std::string& name) const {
  const auto it = file_of_.find(name);
  if (it == file_of_.end()) fail_no_tensor(path_, name, names_.size());
  return files_[it->second];
}

const SafetensorsTensorInfo& SafetensorsCheckpoint::info(const std::string& name) const {
  return file_of(name).info(name);
}

Tensor SafetensorsCheckpoint::load(const std::string& name, Device device) const {
  return file_of(name).load(name, device);
}

void SafetensorsCheckpoint::copy_into(const std::string& name, const Tensor& dst) const {
  file_of(name).copy_into(name, dst);
}

void save_safetensors_checkpoint(const std::string& dir,
                                 const std::vector<std::pair<std::string, Tensor>>& tensors,
                                 size_t max_shard_bytes,
                                 const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes == 0) {
    throw ValueError(
        str_cat("save_safetensors_checkpoint '", dir, "': max_shard_bytes must be positive"));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw Error(str_cat("save_safetensors_checkpoint: cannot create directory '", dir,
                        "': ", ec.message()));
  }
  // Checked here too: a name twice in different shards would otherwise reach the index.
  std::unordered_set<std::string_view> seen;
  for (const auto& entry : tensors) {
    if (!seen.insert(entry.first).second) {
      throw ValueError(str_cat("save_safetensors_checkpoint '", dir, "': tensor name '",
                               entry.first, "' appears twice"));
    }
  }
  std::map<std::string, std::string> file_metadata = metadata;
  file_metadata.emplace("format", "pt");

  // Fill shards in order, as huggingface_hub's split_torch_state_dict_into_shards does.
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  size_t shard_bytes = 0, total_bytes = 0;
  for (const auto& entry : tensors) {
    const size_t nbytes = entry.second.defined() ? entry.second.nbytes() : 0;
    if (!shards.back().empty() && shard_bytes + nbytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(entry);
    shard_bytes += nbytes;
    total_bytes += nbytes;
  }

  const fs::path base(dir);
  std::unordered_set<std::string> written;
  if (shards.size() == 1) {
    save_safetensors((base / kSafetensorsWeightsName).string(), tensors, file_metadata);
    written.insert(kSafetensorsWeightsName);
  } else {
    json weight_map = json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      char file[64];
      std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
      save_safetensors((base / file).string(), shards[i], file_metadata);
      written.insert(file);
      for (const auto& entry : shards[i]) weight_map[entry.first] = file;
    }
    const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    // As save_pretrained writes it: json.dumps(index, indent=2, sort_keys=True) + "\n".
    write_file_atomically((base / kSafetensorsIndexName).string(), index.dump(2) + "\n");
    written.insert(kSafetensorsIndexName);
  }

  // Only now, with the new save complete, remove what an earlier save left.
  static const std::regex kShardName(R"(model-\d{5}-of-\d{5}\.safetensors)");
  std::vector<fs::path> stale;
  for (const fs::directory_entry& entry : fs::directory_iterator(base)) {
    const std::string file = entry.path().filename().string();
    const bool weights = file == kSafetensorsWeightsName || file == kSafetensorsIndexName ||
                         std::regex_match(file, kShardName);
    if (weights && written.count(file) == 0) stale.push_back(entry.path());
  }
  for (const fs::path& file : stale) {
    if (!fs::remove(file, ec) && ec) {
      throw Error(str_cat("save_safetensors_checkpoint '", dir, "': cannot remove the stale '",
                          file.filename().string(), "': ", ec.message()));
    }
  }
}

}  // namespace headroom

// Hugging Face safetensors files: a memory-mapped reader that validates the whole header when it
// opens, a writer, and sharded checkpoints (model.safetensors.index.json) read and written as one.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace headroom {

// The file names of the HF hub (transformers' SAFE_WEIGHTS_NAME and SAFE_WEIGHTS_INDEX_NAME).
inline constexpr const char* kSafetensorsWeightsName = "model.safetensors";
inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";

// save_pretrained's default max_shard_size, "5GB" (decimal, as HF counts).
inline constexpr size_t kDefaultMaxShardBytes = 5'000'000'000;

// One tensor of a safetensors file.
struct SafetensorsTensorInfo {
  DType dtype = DType::f32;
  Shape shape;
  size_t offset = 0;  // where its bytes start in the data buffer (the header's data_offsets[0])
  size_t nbytes = 0;
};

// A safetensors file opened for reading. The file is memory-mapped (read-only, private) and its
// header validated completely on open, as the reference implementation does: a bad length,
// invalid JSON, an unknown dtype, a shape that does not match its byte range, tensors that
// overlap or leave holes — every fault is a ValueError naming the file, the tensor and the value.
// Tensors are copied out of the mapping into allocator-backed tensors, so that every tensor byte
// is counted by the CachingAllocator; the mapping itself is never a tensor's storage.
// The file must not be truncated by another process while it is open (reads would fault).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In the order of their bytes in the file, which for files headroom writes is the order they
  // were saved in (HF's writer sorts by dtype alignment, then name).
  const std::vector<std::string>& names() const { return names_; }
  size_t size() const { return names_.size(); }
  bool contains(const std::string& name) const { return infos_.count(name) != 0; }
  // ValueError naming the file when there is no such tensor (as do data, load and copy_into).
  const SafetensorsTensorInfo& info(const std::string& name) const;
  // The header's "__metadata__" (empty when it has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's bytes inside the mapping, valid while this object lives. Not necessarily
  // aligned: the header length of a hand-made file need not be a multiple of 8.
  const void* data(const std::string& name) const;
  // A new contiguous tensor on `device` holding a copy of the bytes (on meta: no copy at all).
  Tensor load(const std::string& name, Device device = kCPU) const;
  // Copies the tensor into `dst`, whose shape must equal the file's. The dtypes must match,
  // except that an F32, F16 or BF16 tensor may go into a tensor of any floating dtype (converted
  // with round-to-nearest-even, as Tensor::copy_), e.g. a bf16 checkpoint into an fp32 model.
  void copy_into(const std::string& name, const Tensor& dst) const;

 private:
  void unmap() noexcept;
  void parse_header();

  std::string path_;
  const unsigned char* mapping_ = nullptr;
  size_t mapping_size_ = 0;
  size_t data_start_ = 0;  // 8 + header length: where the data buffer starts in the file
  std::vector<std::string> names_;
  std::unordered_map<std::string, SafetensorsTensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` in the given order, back to back (the format allows no gaps), after a compact
// JSON header padded with spaces to a multiple of 8 bytes, as the reference writer does. Tensors
// on another device or not contiguous are copied to contiguous CPU memory first, one at a time.
// The file is written atomically (temporary file, fsync, rename); the whole file is assembled in
// host memory first, since write_file_atomically takes one buffer. ValueError for a duplicate or
// reserved ("__metadata__") name, an undefined or meta tensor.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// The weights of a model as the HF hub stores them: one model.safetensors, or shards listed by
// model.safetensors.index.json ({"metadata": {"total_size": N}, "weight_map": {name: shard}}).
// The index and every shard are checked against each other on open: a missing shard, a tensor
// the index maps to a shard that does not hold it, and a shard holding a tensor the index does
// not map to it are ValueErrors naming the index file.
class SafetensorsCheckpoint {
 public:
  // `path` is a directory (model.safetensors is preferred over the index when both are there,
  // as transformers does), an index file (*.json) or a single .safetensors file.
  explicit SafetensorsCheckpoint(const std::string& path);

  // The file or index file that was opened.
  const std::string& path() const { return path_; }
  bool is_sharded() const { return sharded_; }
  // Shard by shard in the order of their file names, each in the order of its bytes.
  const std::vector<std::string>& names() const { return names_; }
  size_t size() const { return names_.size(); }
  bool contains(const std::string& name) const { return file_of_.count(name) != 0; }
  const SafetensorsTensorInfo& info(const std::string& name) const;
  Tensor load(const std::string& name, Device device = kCPU) const;
  void copy_into(const std::string& name, const Tensor& dst) const;
  // The shard holding a tensor, and all of them.
  const SafetensorsFile& file_of(const std::string& name) const;
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  void open_index(const std::string& index_path);

  std::string path_;
  bool sharded_ = false;
  std::vector<SafetensorsFile> files_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, size_t> file_of_;  // name -> index into files_
};

// Saves `tensors` into directory `dir` (created if missing) as save_pretrained does: one
// model.safetensors when their bytes fit in `max_shard_bytes`, else shards named
// model-0000i-of-0000n.safetensors, filled in order (a tensor larger than the limit gets a
// shard of its own), plus model.safetensors.index.json. Every file carries `metadata` plus
// {"format": "pt"}, which transformers' from_pretrained requires of a file that has metadata.
// Each file is written atomically, and what makes the new save the one readers pick
// (model.safetensors, or the index and then removing an old model.safetensors) happens last;
// weight files of an earlier save that the new one does not use are removed only then. So a
// crash leaves the old checkpoint or the new one — except when a sharded save replaces one with
// as many shards, whose clashing names are replaced one by one. Save into a fresh directory (as
// Trainer's checkpoint-N) where that matters.
void save_safetensors_checkpoint(const std::string& dir,
                                 const std::vector<std::pair<std::string, Tensor>>& tensors,
                                 size_t max_shard_bytes = kDefaultMaxShardBytes,
                                 const std::map<std::string, std::string>& metadata = {});

}  // namespace headroom

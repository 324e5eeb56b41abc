// The files of a ZeRO checkpoint (See Note [ZeRO checkpoints]).
#include "train/zero_checkpoint.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_file.h"
#include "train/checkpoint.h"

namespace headroom {

namespace fs = std::filesystem;

std::string zero_optimizer_file(int rank, int world_size) {
  return str_cat("optimizer-rank-", rank, "-of-", world_size, ".safetensors");
}

void write_zero_manifest(const std::string& dir, int world_size, int64_t zero_stage) {
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (int rank = 0; rank < world_size; ++rank)
    files.push_back(zero_optimizer_file(rank, world_size));
  const nlohmann::ordered_json manifest = {
      {"world_size", world_size}, {"zero_stage", zero_stage}, {"optimizer_files", files}};
  write_file_atomically((fs::path(dir) / kZeroManifestFile).string(), manifest.dump(2) + "\n");
}

std::string zero_checkpoint_optimizer_file(const std::string& dir, int rank, int world_size,
                                           bool sharded) {
  const fs::path manifest_path = fs::path(dir) / kZeroManifestFile;
  if (!fs::exists(manifest_path)) {
    if (sharded) {
      throw ValueError(str_cat("resume_from_checkpoint: ", dir, " has no ", kZeroManifestFile,
                               ": it holds one optimizer state for every parameter, written "
                               "without ZeRO sharding; resume it with zero_stage 0"));
    }
    return kOptimizerFile;
  }
  const std::string path = manifest_path.string();
  const nlohmann::json manifest = parse_json(read_text_file(path), path);
  const nlohmann::json saved_world =
      manifest.is_object() ? manifest.value("world_size", nlohmann::json()) : nlohmann::json();
  if (!saved_world.is_number_integer() || saved_world.get<int64_t>() < 1) {
    throw ValueError(
        str_cat(path, ": world_size is ", saved_world.dump(), ", not a positive integer"));
  }
  const int64_t saved = saved_world.get<int64_t>();
  if (!sharded) {
    throw ValueError(str_cat(path, ": the checkpoint holds the optimizer states sharded over ",
                             saved, " ranks (ZeRO); resume it with mpirun -np ", saved,
                             " and zero_stage 1, 2 or 3"));
  }
  if (saved != world_size) {
    throw ValueError(str_cat(path, ": the checkpoint was written by ", saved,
                             " ranks, this run "
                             "has ",
                             world_size,
                             "; ZeRO's shards depend on the world size: "
                             "resume it with mpirun -np ",
                             saved));
  }
  return zero_optimizer_file(rank, world_size);
}

}  // namespace headroom

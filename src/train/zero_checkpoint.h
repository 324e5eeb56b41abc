// ZeRO checkpoints: each data-parallel rank's shard of the optimizer states in a file of its own
// inside the one checkpoint directory, and a manifest that rank 0 writes once every shard is in.
#pragma once

#include <cstdint>
#include <string>

namespace headroom {

// Note [ZeRO checkpoints]
// Under ZeRO-1/2 every rank holds the whole model but only its share's optimizer states. A
// checkpoint is the usual directory (rank 0's model.safetensors, consolidated as HF reads it:
// under ZeRO-3 every rank gathers the blocks for the write; scheduler, scaler, RNG and trainer
// state, the same on every rank) with the optimizer state as optimizer-rank-R-of-N.safetensors
// per rank, plus zero_checkpoint.json. Rank 0 fills commit_checkpoint's temporary directory and
// tells the others its name (its pid, reduced over the ranks); each rank writes its shard there
// (write_file_atomically: a temporary file, fsync, rename), the ranks meet at a barrier, and
// rank 0 writes the manifest and the checksums (which cover the shards) and commits the
// directory (fsync, rename). A resume needs the same world size, as the shares depend on it;
// ZeRO-1, 2 and 3 share alike, so each resumes the others' checkpoints.
inline constexpr const char* kZeroManifestFile = "zero_checkpoint.json";

// "optimizer-rank-R-of-N.safetensors".
std::string zero_optimizer_file(int rank, int world_size);

// zero_checkpoint.json in `dir`: {"world_size", "zero_stage", "optimizer_files"}, atomically.
void write_zero_manifest(const std::string& dir, int world_size, int64_t zero_stage);

// The optimizer file rank `rank` of `world_size` reads from checkpoint `dir`: kOptimizerFile
// when the run is not sharded (one process, or zero_stage 0), else its shard. ValueError naming
// the manifest when the checkpoint's sharding is not the run's: another world size (resume it
// with mpirun -np N), a sharded checkpoint for a run without ZeRO, or the reverse.
std::string zero_checkpoint_optimizer_file(const std::string& dir, int rank, int world_size,
                                           bool sharded);

}  // namespace headroom

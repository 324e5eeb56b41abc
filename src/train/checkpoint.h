// Trainer checkpoints on disk: output_dir/checkpoint-STEP/ with HF's file roles (weights, config,
// optimizer, scheduler, scaler, RNG and trainer state), committed atomically, rotated by
// save_total_limit, found again by "last", and read back fully checked before anything is applied.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "optim/optimizer.h"

namespace headroom {

// The files of a checkpoint directory. HF writes optimizer.pt, scheduler.pt, scaler.pt and
// rng_state.pth (pickles); headroom writes safetensors and JSON under the same roles.
inline constexpr const char* kCheckpointPrefix = "checkpoint-";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kSchedulerFile = "scheduler.json";
inline constexpr const char* kScalerFile = "scaler.json";
inline constexpr const char* kRngStateFile = "rng_state.json";
inline constexpr const char* kTrainerStateFile = "trainer_state.json";
// FP8 training's state (quant/fp8_linear.h's Fp8Training::state_dict, its recipe in the
// metadata): fp8_state.safetensors, or under data parallelism each rank's own (their amaxes are
// their own micro-batches'), fp8_state-rank-R-of-W.safetensors.
std::string fp8_state_file(int rank, int world_size);
// The safetensors metadata key holding the optimizer's JSON state (OptimizerStateDict::meta).
inline constexpr const char* kOptimizerMetaKey = "optimizer_state";

// The checkpoint-STEP directories in `output_dir`, oldest step first (HF's _sorted_checkpoints
// orders by the number too). Temporary directories of unfinished saves are not listed.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& output_dir);

// Creates a fresh temporary directory in `output_dir`, lets `write_files` fill it (each file
// written atomically, so each is fsynced), fsyncs the directory, renames it to
// output_dir/checkpoint-STEP (replacing one of that name) and fsyncs output_dir. A crash or an
// error leaves either no checkpoint-STEP or a complete one; the temporary directory is removed on
// error. Returns the checkpoint's path.
std::string commit_checkpoint(const std::string& output_dir, int64_t step,
                              const std::function<void(const std::string& dir)>& write_files);
// The temporary directory commit_checkpoint fills in process `pid` (data-parallel ranks write
// their shards into rank 0's).
std::string checkpoint_temp_dir(const std::string& output_dir, int64_t step, int64_t pid);

// HF's _rotate_checkpoints: when more than `save_total_limit` checkpoints exist, the oldest are
// deleted until that many remain (a limit of 0 or below keeps them all). Returns those deleted.
std::vector<std::string> rotate_checkpoints(const std::string& output_dir,
                                            int64_t save_total_limit);

// Deletes a checkpoint directory so that it is never seen half-deleted: it is first renamed to
// deleting-checkpoint-STEP-PID next to it (a name list_checkpoints never lists), the rename made
// durable, and only then deleted. A kill in the middle leaves that leftover, which
// remove_checkpoint_leftovers deletes.
void remove_checkpoint(const std::string& dir);

// Deletes the leftovers of killed saves (tmp-checkpoint-STEP-PID) and rotations
// (deleting-checkpoint-STEP-PID) in `output_dir`, and the temporary files of killed whole-file
// writes (.NAME.tmp-PID-COUNTER-TICKS, core/atomic_file.cpp: the final model's), whose PID is not
// running; those of a running process (another run's save in progress) stay. Returns those
// deleted.
std::vector<std::string> remove_checkpoint_leftovers(const std::string& output_dir);

// Everything in a checkpoint directory, parsed and opened, before any of it is applied.
struct CheckpointContents {
  std::string dir;
  // model.safetensors (and config.json present), or adapter_model.safetensors (and
  // adapter_config.json) for an adapter's checkpoint
  std::unique_ptr<SafetensorsCheckpoint> weights;
  OptimizerStateDict optimizer;
  nlohmann::json scheduler;
  nlohmann::json scaler;  // null when the checkpoint has no scaler.json
  nlohmann::json rng_state;
  nlohmann::ordered_json trainer_state;  // key order kept, as it is shown again
  // `fp8_file`'s tensors and metadata, when the checkpoint has that file (an FP8 run's)
  std::optional<
      std::pair<std::vector<std::pair<std::string, Tensor>>, std::map<std::string, std::string>>>
      fp8_state;
  // training_config.json's fields (train/training_config_record.h), when the checkpoint has the
  // file (saved since headroom writes it)
  std::optional<nlohmann::ordered_json> training_config;
};

// Reads a checkpoint: every file must be there (scaler.json when `needs_scaler`) and match its
// checksum (train/checksums.h; a checkpoint without checksums.json is read with a warning), JSON
// must parse, safetensors headers must be whole and consistent with the file sizes,
// trainer_state.json needs an integer global_step >= 0 and a log_history array of objects each
// with an integer step in 0..global_step and numeric losses, and its "headroom" counters in range
// (check_trainer_state_extra), rng_state.json a generator seed and offset (unsigned integers),
// training_config.json (when there) fields each with a value and changes_math.
// ValueError naming the file at fault. Optimizer tensors are loaded onto `device`. `adapter`:
// the checkpoint of a LoRA run, whose weights are PEFT's adapter files.
// `optimizer_file`: the optimizer state's file in `dir` (a ZeRO rank's shard,
// train/zero_checkpoint.h); `fp8_file`: this rank's FP8 state, read when it is there.
CheckpointContents read_checkpoint(const std::string& dir, bool needs_scaler, Device device,
                                   bool adapter = false,
                                   const std::string& optimizer_file = kOptimizerFile,
                                   const std::string& fp8_file = fp8_state_file(0, 1));

// Runs `apply`; an exception that does not name `path` is rethrown as a ValueError that does, so
// that a checkpoint's errors always say which file was bad.
void with_checkpoint_file(const std::string& path, const std::function<void()>& apply);

}  // namespace headroom

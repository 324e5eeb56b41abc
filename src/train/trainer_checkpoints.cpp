// The Trainer's checkpoints: saving one (atomically, rotated), the output directory's
// housekeeping, loading one back and resuming bit for bit.
#include "train/trainer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <system_error>
#include <unordered_map>
#include <unordered_set>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/grad_mode.h"
#include "core/kernel_census.h"
#include "core/record_function.h"
#include "io/pretrained.h"
#include "memory/device_memory.h"
#include "memory/memory_history.h"
#include "memory/memory_snapshot.h"
#include "memsave/activation_offload.h"
#include "memsave/checkpoint_policy.h"
#include "memsave/param_offload.h"
#include "nn/linear_4bit.h"
#include "nn/linear_fp8.h"
#include "nn/model_presets.h"
#include "ops/autocast.h"
#include "ops/ops.h"
#include "optim/clip_grad.h"
#include "optim/optimizer_factory.h"
#include "optim/optimizer_offload.h"
#include "memory/host_pool.h"
#include "peft/lora_model.h"
#include "train/checkpoint.h"
#include "train/deepspeed_config.h"
#include "train/checksums.h"
#include "train/generate.h"
#include "train/model_assembly.h"
#include "train/optimizer_assembly.h"
#include "train/model_source.h"
#include "train/progress.h"
#include "train/stop_signals.h"
#include "train/training_config_record.h"
#include "data/token_corpus.h"
#include "dist/gradient_reducer.h"
#include "dist/mpi_communicator.h"
#include "dist/rank_options.h"
#include "dist/zero_optimizer.h"
#include "dist/zero_parameters.h"
#include "train/zero_checkpoint.h"
#include "core/json_file.h"
#include "train/data_loader_batch_source.h"
#include "train/sharded_batch_source.h"

namespace headroom {

namespace fs = std::filesystem;

namespace {

std::string dump_json(const nlohmann::ordered_json& value) { return value.dump(2) + "\n"; }

}  // namespace

nlohmann::ordered_json Trainer::trainer_state() const {
  return {{"global_step", global_step_},
          {"epoch", epoch()},
          {"max_steps", max_steps_},
          {"num_train_epochs", args_.num_train_epochs},
          {"logging_steps", args_.logging_steps},
          {"eval_steps", args_.eval_steps.value_or(args_.logging_steps)},
          {"save_steps", args_.save_steps},
          {"train_batch_size", args_.per_device_train_batch_size},
          {"best_metric", nullptr},
          {"best_model_checkpoint", nullptr},
          {"log_history", log_history_},
          {"headroom",
           {{"precision", config_.recipe.name()},
            {"gradient_accumulation_steps", args_.gradient_accumulation_steps},
            {"interval_loss", interval_loss_},
            {"interval_steps", interval_steps_},
            {"interval_tokens", interval_tokens_},
            {"interval_seconds", interval_seconds_},
            {"total_tokens", total_tokens_}}}};
}

std::string Trainer::save_checkpoint() {
  // See Note [ZeRO checkpoints]: each rank's optimizer shard goes into rank 0's directory. Under
  // ZeRO-3 rank 0 writes the whole model from host copies, gathered a block at a time.
  HostGatheredParameters whole(zero_parameters_.get(), 0);
  const bool sharded = sharded_optimizer();
  const int rank = communicator_ ? communicator_->rank() : 0;
  const int world = communicator_ ? communicator_->world_size() : 1;
  // Files of every rank's own: ZeRO's optimizer shards, FP8's states.
  const bool rank_files = communicator_ && (sharded || fp8_);
  auto write_rank_files = [&](const std::string& dir) {
    if (fp8_) {
      save_safetensors((fs::path(dir) / fp8_state_file(rank, world)).string(), fp8_->state_dict(),
                       fp8_->state_metadata());
    }
    if (!sharded && !is_main_process()) return;  // one optimizer file, rank 0's
    const OptimizerStateDict state = optimizer_->state_dict();
    const std::string file =
        sharded ? zero_optimizer_file(rank, world) : std::string(kOptimizerFile);
    save_safetensors((fs::path(dir) / file).string(), state.tensors,
                     {{kOptimizerMetaKey, state.meta.dump()}});
  };
  if (!is_main_process()) {
    // Rank 0 writes the one checkpoint every rank resumes from (their states are equal: Note
    // [Data-parallel batches equal a single process's]), the others their own files into it
    // (ZeRO's optimizer shards, FP8's amaxes of their micro-batches) and wait until it is whole.
    if (rank_files) {
      const auto pid = static_cast<int64_t>(communicator_->all_reduce_scalar(0.0, ReduceOp::sum));
      write_rank_files(checkpoint_temp_dir(args_.output_dir, global_step_, pid));
      communicator_->barrier();  // every rank's files are in
    }
    communicator_->barrier();
    last_saved_step_ = global_step_;
    return (fs::path(args_.output_dir) / str_cat(kCheckpointPrefix, global_step_)).string();
  }
  const std::string dir =
      commit_checkpoint(args_.output_dir, global_step_, [&](const std::string& tmp) {
        const fs::path root(tmp);
        save_model_files(tmp);  // as HF's Trainer: a checkpoint is a model (or adapter) directory
        write_rank_files(tmp);
        write_file_atomically((root / kSchedulerFile).string(),
                              dump_json(nlohmann::ordered_json(scheduler_->state_dict())));
        if (scaler_->is_enabled()) {
          write_file_atomically((root / kScalerFile).string(),
                                dump_json(nlohmann::ordered_json(scaler_->state_dict())));
        }
        const Generator& generator = default_generator();
        const nlohmann::ordered_json rng = {
            {"generator", {{"seed", generator.seed()}, {"offset", generator.offset()}}},
            {"data", nlohmann::ordered_json(data_->state_dict())}};
        write_file_atomically((root / kRngStateFile).string(), dump_json(rng));
        write_file_atomically((root / kTrainerStateFile).string(), dump_json(trainer_state()));
        write_file_atomically(
            (root / kTrainingConfigFile).string(),
            training_config_json(training_config_record(config_, model_->config())));
        if (rank_files) {
          communicator_->all_reduce_scalar(static_cast<double>(::getpid()), ReduceOp::sum);
          communicator_->barrier();  // every rank's files are in
        }
        if (sharded) write_zero_manifest(tmp, world, config_.zero_stage);
        write_checkpoint_checksums(tmp);  // last: it covers every file above
      });
  last_saved_step_ = global_step_;
  if (args_.save_total_limit) {
    for (const std::string& deleted :
         rotate_checkpoints(args_.output_dir, *args_.save_total_limit)) {
      print_log_line(str_cat("Deleting older checkpoint [", deleted, "] due to save_total_limit"));
    }
  }
  remove_leftovers();
  if (communicator_) communicator_->barrier();
  return dir;
}

void Trainer::remove_leftovers() {
  for (const std::string& deleted : remove_checkpoint_leftovers(args_.output_dir)) {
    print_log_line(str_cat("Removed ", deleted, ", left by a save or rotation that was killed"));
  }
}

void Trainer::prepare_output_dir() {
  const auto checkpoints = list_checkpoints(args_.output_dir);
  if (args_.resume_from_checkpoint.empty() && !checkpoints.empty()) {
    std::string names;
    for (const auto& [step, path] : checkpoints) {
      names += str_cat(names.empty() ? "" : ", ", fs::path(path).filename().string());
    }
    // Another run's checkpoints would be taken for this one's: rotation would keep the stale
    // higher-numbered ones and delete each new one, and "last" would resume the other run.
    if (!args_.overwrite_output_dir) {
      throw ValueError(str_cat("output_dir: '", args_.output_dir,
                               "' holds the checkpoints of an "
                               "earlier run (",
                               names,
                               "); resume it with "
                               "--resume_from_checkpoint last, or pass --overwrite_output_dir to "
                               "delete them"));
    }
    for (const auto& [step, path] : checkpoints) remove_checkpoint(path);
    std::printf("Deleted %s in %s (overwrite_output_dir)\n", names.c_str(),
                args_.output_dir.c_str());
  }
  remove_leftovers();
}

namespace {

// The FP8 state files in checkpoint `dir` (any rank's), comma-separated.
std::string fp8_state_files(const std::string& dir) {
  std::string names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("fp8_state", 0) == 0) names += str_cat(names.empty() ? "" : ", ", name);
  }
  return names;
}

}  // namespace

void Trainer::load_checkpoint(const std::string& dir) {
  const std::string optimizer_file = zero_checkpoint_optimizer_file(
      dir, communicator_ ? communicator_->rank() : 0,
      communicator_ ? communicator_->world_size() : 1, sharded_optimizer());
  const int rank = communicator_ ? communicator_->rank() : 0;
  const int world = communicator_ ? communicator_->world_size() : 1;
  const std::string fp8_file = fp8_state_file(rank, world);
  const CheckpointContents saved = read_checkpoint(dir, scaler_->is_enabled(), config_.device,
                                                   lora_.has_value(), optimizer_file, fp8_file);
  const fs::path root(dir);
  // The configuration first, before anything is applied (Note [What a resume may change]); a
  // checkpoint saved without its record has its adapters' options compared, by the same rule:
  // adapters resumed with another scaling would train on silently.
  const HfConfig model_config = model_->config();
  if (saved.training_config) {
    check_resumed_config(*saved.training_config, training_config_record(config_, model_config),
                         (root / kTrainingConfigFile).string());
  } else if (lora_) {
    const std::string config_file = (root / kAdapterConfigFile).string();
    LoraConfig adapter;
    with_checkpoint_file(config_file, [&] {
      adapter = parse_lora_adapter_config(parse_json(read_text_file(config_file), config_file),
                                          config_file);
    });
    check_resumed_config(config_record_fields(lora_config_record(adapter, model_config)),
                         lora_config_record(lora_, model_config), config_file);
  }
  // The base an adapter trains on: its files' digests are no option of the run.
  if (adapter_base_) {
    if (const std::optional<AdapterBase> recorded = read_adapter_base(dir)) {
      check_adapter_base(*recorded, *adapter_base_, (root / kAdapterBaseFile).string());
    }
  }
  // FP8's state: a run whose FP8 options differ is refused before anything is applied.
  if (fp8_ && saved.fp8_state) {
    with_checkpoint_file((root / fp8_file).string(), [&] {
      fp8_->load_state_dict(saved.fp8_state->first, saved.fp8_state->second);
    });
  } else if (const std::string files = fp8_state_files(dir); fp8_ || !files.empty()) {
    std::string saved_by = "a run without FP8";
    if (!files.empty()) {
      saved_by = fp8_ ? str_cat("another number of ranks (", files, ", not ", fp8_file, ")")
                      : str_cat("an FP8 run (", files, ")");
    }
    throw ValueError(str_cat("fp8: ", dir, " was saved by ", saved_by, "; this run has ",
                             fp8_ ? fp8_->recipe().describe() : std::string("no FP8"),
                             ". Resume with the FP8 options it was trained with"));
  }
  with_checkpoint_file(saved.weights->path(), [&] {
    if (lora_) {
      load_lora_weights(*model_, *saved.weights);
    } else {
      load_weights(*model_, *saved.weights);
    }
  });
  with_checkpoint_file((root / optimizer_file).string(),
                       [&] { optimizer_->load_state_dict(saved.optimizer); });
  with_checkpoint_file((root / kSchedulerFile).string(),
                       [&] { scheduler_->load_state_dict(saved.scheduler); });
  if (scaler_->is_enabled()) {
    with_checkpoint_file((root / kScalerFile).string(),
                         [&] { scaler_->load_state_dict(saved.scaler); });
  }
  with_checkpoint_file((root / kRngStateFile).string(), [&] {
    data_->load_state_dict(saved.rng_state.at("data"));
    const nlohmann::json& generator = saved.rng_state.at("generator");
    default_generator().manual_seed(generator.at("seed").get<uint64_t>());
    default_generator().set_offset(generator.at("offset").get<uint64_t>());
  });
  with_checkpoint_file((root / kTrainerStateFile).string(), [&] {
    const nlohmann::ordered_json& state = saved.trainer_state;
    global_step_ = state.at("global_step").get<int64_t>();
    log_history_ = state.at("log_history");
    if (state.contains("headroom")) {
      const nlohmann::ordered_json& extra = state.at("headroom");
      // Each checked by read_checkpoint (integers in range, finite numbers).
      interval_loss_ = extra.value("interval_loss", 0.0);
      interval_steps_ = extra.value("interval_steps", int64_t{0});
      interval_tokens_ = extra.value("interval_tokens", int64_t{0});
      interval_seconds_ = extra.value("interval_seconds", 0.0);
      total_tokens_ = extra.value("total_tokens", int64_t{0});
    }
  });
  last_saved_step_ = global_step_;
}

void Trainer::resume() {
  const std::string& target = args_.resume_from_checkpoint;
  // Past max_steps the run would train no step and write the checkpoint's model over output_dir's
  // as if it were this run's result.
  auto resumed_from = [&](const std::string& dir) {
    if (global_step_ > max_steps_) {
      throw ValueError(str_cat("resume_from_checkpoint: ", dir, " is at step ", global_step_,
                               ", past this run's max_steps ", max_steps_,
                               " (another run's checkpoint, or max_steps too small)"));
    }
    if (!is_main_process()) return;
    std::printf("Resumed from %s at step %lld\n", dir.c_str(),
                static_cast<long long>(global_step_));
  };
  if (target != "last") {
    load_checkpoint(target);
    resumed_from(target);
    return;
  }
  auto checkpoints = list_checkpoints(args_.output_dir);
  std::string last_error;
  bool dirty = false;  // a failed load may have changed some state: rebuild before the next try
  for (auto it = checkpoints.rbegin(); it != checkpoints.rend(); ++it) {
    try {
      if (dirty) build();
      dirty = true;
      load_checkpoint(it->second);
    } catch (const ResumeConfigError&) {
      throw;  // the older checkpoints are the same run's
    } catch (const std::exception& e) {
      last_error = e.what();
      std::fprintf(stderr, "warning: skipping checkpoint %s: %s\n", it->second.c_str(), e.what());
      continue;
    }
    resumed_from(it->second);
    return;
  }
  throw ValueError(str_cat("resume_from_checkpoint=last: no valid ", kCheckpointPrefix,
                           "* in output_dir '", args_.output_dir, "'",
                           last_error.empty() ? "" : str_cat(" (last error: ", last_error, ")")));
}

void Trainer::save_model_files(const std::string& dir) const {
  if (lora_) {
    save_lora_adapter(*model_, *lora_, dir);  // PEFT's save_pretrained: the adapter only
    if (adapter_base_) write_adapter_base(dir, *adapter_base_);
  } else {
    save_pretrained(*model_, dir);
  }
  save_tokenizer(*tokenizer_, dir);
}

}  // namespace headroom

// Checkpoint directories: atomic commit, rotation, discovery and checked reading.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <system_error>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/text_value.h"
#include "core/json_file.h"
#include "train/checksums.h"
#include "train/training_config_record.h"

namespace headroom {

namespace fs = std::filesystem;

namespace {

std::optional<int64_t> checkpoint_step(const std::string& name) {
  const std::string prefix = kCheckpointPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return {};
  // Digits only, as HF's "checkpoint-(\d+)": no sign.
  const std::string_view digits = std::string_view(name).substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), ::isdigit)) return {};
  return whole_number<int64_t>(digits);
}

nlohmann::json read_json_file(const fs::path& path) {
  return parse_json(read_text_file(path.string()), path.string());
}

// The prefixes of what a killed save or rotation leaves: tmp-checkpoint-STEP-PID while a save
// writes its files, deleting-checkpoint-STEP-PID while a rotation deletes one.
constexpr const char* kLeftoverPrefixes[] = {"tmp-", "deleting-"};

// The PID in the name of write_file_atomically's temporary file (.NAME.tmp-PID-COUNTER-TICKS,
// core/atomic_file.cpp), or nothing.
std::optional<pid_t> atomic_temp_pid(const std::string& name) {
  const size_t tmp = name.rfind(".tmp-");
  if (name.empty() || name[0] != '.' || tmp == std::string::npos) return {};
  // Groups of digits separated by single dashes, the PID first.
  const std::string rest = name.substr(tmp + 5);
  size_t groups = 0;
  for (size_t begin = 0; begin <= rest.size();) {
    size_t end = rest.find('-', begin);
    if (end == std::string::npos) end = rest.size();
    if (end == begin || !std::all_of(rest.begin() + static_cast<std::ptrdiff_t>(begin),
                                     rest.begin() + static_cast<std::ptrdiff_t>(end), ::isdigit)) {
      return {};
    }
    ++groups;
    begin = end + 1;
  }
  const size_t pid_digits = rest.find('-');
  if (groups < 2 || pid_digits > 9) return {};
  return static_cast<pid_t>(std::stol(rest.substr(0, pid_digits)));
}

// The PID of a leftover's name (PREFIX checkpoint-STEP-PID), or nothing for any other name.
std::optional<pid_t> leftover_pid(const std::string& name) {
  for (const std::string prefix : kLeftoverPrefixes) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const size_t dash = rest.rfind('-');
    if (dash == std::string::npos || !checkpoint_step(rest.substr(0, dash))) return {};
    const std::string pid = rest.substr(dash + 1);
    if (pid.empty() || pid.size() > 9 || !std::all_of(pid.begin(), pid.end(), ::isdigit)) return {};
    return static_cast<pid_t>(std::stol(pid));
  }
  return {};
}

bool process_is_running(pid_t pid) {
  if (pid <= 0) return true;            // not a process of ours to judge: kept
  if (pid == ::getpid()) return false;  // this process saves one checkpoint at a time
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

void require_file(const fs::path& path) {
  if (!fs::is_regular_file(path)) {
    throw ValueError(str_cat(path.string(), ": missing from the checkpoint"));
  }
}

// Each log_history entry: an object with an integer step in 0..global_step (the plot and the
// resumed log index by it), and a number or null for each metric (null: HF's missing grad_norm,
// and what JSON makes of a NaN or infinite loss, which the plot leaves out).
void check_log_history(const nlohmann::json& history, int64_t global_step) {
  for (size_t i = 0; i < history.size(); ++i) {
    const nlohmann::json& entry = history[i];
    const std::string where = str_cat("log_history[", i, "]");
    if (!entry.is_object()) {
      throw ValueError(str_cat(where, ": ", entry.dump(), " is not an object"));
    }
    const auto step = entry.find("step");
    if (step == entry.end() || !step->is_number_integer() || step->get<int64_t>() < 0 ||
        step->get<int64_t>() > global_step) {
      throw ValueError(str_cat(where, ".step: ", step == entry.end() ? "missing" : step->dump(),
                               ", expected an integer in 0..", global_step, " (global_step)"));
    }
    for (const auto& [key, value] : entry.items()) {
      if (!value.is_number() && !value.is_null()) {
        throw ValueError(str_cat(where, ".", key, ": ", value.dump(), " is not a number"));
      }
    }
  }
}

// trainer_state.json's "headroom" counters, as the Trainer keeps them: integers >= 0 that a run
// can add to without overflow (below 2^62), an interval loss and time that are finite.
void check_trainer_state_extra(const nlohmann::json& extra) {
  if (!extra.is_object()) {
    throw ValueError(str_cat("headroom: ", extra.dump(), " is not an object"));
  }
  constexpr int64_t kCountLimit = int64_t{1} << 62;
  for (const char* key : {"interval_steps", "interval_tokens", "total_tokens"}) {
    if (!extra.contains(key)) continue;
    const nlohmann::json& value = extra[key];
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() >= kCountLimit) {
      throw ValueError(str_cat("headroom.", key, ": ", value.dump(), " is not an integer in 0..",
                               kCountLimit - 1));
    }
  }
  for (const char* key : {"interval_loss", "interval_seconds"}) {
    if (!extra.contains(key)) continue;
    const nlohmann::json& value = extra[key];
    if (!value.is_number() || !std::isfinite(value.get<double>()) ||
        (key == std::string("interval_seconds") && value.get<double>() < 0.0)) {
      throw ValueError(str_cat("headroom.", key, ": ", value.dump(), " is not a finite number",
                               key == std::string("interval_seconds") ? " >= 0" : ""));
    }
  }
}

}  // namespace

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> result;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return result;
  for (const fs::directory_entry& entry : fs::directory_iterator(output_dir)) {
    if (!entry.is_directory()) continue;
    if (std::optional<int64_t> step = checkpoint_step(entry.path().filename().string())) {
      result.emplace_back(*step, entry.path().string());
    }
  }
  std::sort(result.begin(), result.end());
  return result;
}

std::string checkpoint_temp_dir(const std::string& output_dir, int64_t step, int64_t pid) {
  return (fs::path(output_dir) / str_cat("tmp-", kCheckpointPrefix, step, "-", pid)).string();
}

std::string commit_checkpoint(const std::string& output_dir, int64_t step,
                              const std::function<void(const std::string& dir)>& write_files) {
  const fs::path out(output_dir);
  fs::create_directories(out);
  const fs::path final_dir = out / str_cat(kCheckpointPrefix, step);
  // The pid keeps two processes writing into one output_dir off each other's directory.
  const fs::path tmp_dir = checkpoint_temp_dir(output_dir, step, ::getpid());
  fs::remove_all(tmp_dir);
  fs::create_directory(tmp_dir);
  try {
    write_files(tmp_dir.string());
    fsync_directory(tmp_dir.string(), "checkpoint");
    // A directory cannot be renamed over a non-empty one: the old checkpoint of this step (a run
    // resumed before it) goes first, renamed away before it is deleted; until the rename, only
    // the temporary copy exists.
    if (fs::exists(final_dir)) remove_checkpoint(final_dir.string());
    fs::rename(tmp_dir, final_dir);
    fsync_directory(out.string(), "checkpoint");
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp_dir, ignored);
    throw;
  }
  return final_dir.string();
}

std::vector<std::string> rotate_checkpoints(const std::string& output_dir,
                                            int64_t save_total_limit) {
  std::vector<std::string> deleted;
  if (save_total_limit <= 0) return deleted;
  const auto checkpoints = list_checkpoints(output_dir);
  const int64_t excess = static_cast<int64_t>(checkpoints.size()) - save_total_limit;
  for (int64_t i = 0; i < excess; ++i) {
    remove_checkpoint(checkpoints[static_cast<size_t>(i)].second);
    deleted.push_back(checkpoints[static_cast<size_t>(i)].second);
  }
  return deleted;
}

void remove_checkpoint(const std::string& dir) {
  const fs::path path(dir);
  const fs::path doomed =
      path.parent_path() / str_cat("deleting-", path.filename().string(), "-", ::getpid());
  fs::remove_all(doomed);
  fs::rename(path, doomed);
  // Durable before the first file goes: a crash must not leave checkpoint-STEP half-deleted.
  fsync_directory(path.parent_path().string(), "checkpoint");
  fs::remove_all(doomed);
}

std::vector<std::string> remove_checkpoint_leftovers(const std::string& output_dir) {
  std::vector<std::string> deleted;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return deleted;
  for (const fs::directory_entry& entry : fs::directory_iterator(output_dir)) {
    const std::string name = entry.path().filename().string();
    // Directories of saves and rotations; files of whole-file writes (the final model's).
    const std::optional<pid_t> pid = entry.is_directory()      ? leftover_pid(name)
                                     : entry.is_regular_file() ? atomic_temp_pid(name)
                                                               : std::nullopt;
    if (!pid || process_is_running(*pid)) continue;
    fs::remove_all(entry.path());
    deleted.push_back(entry.path().string());
  }
  return deleted;
}

void with_checkpoint_file(const std::string& path, const std::function<void()>& apply) {
  try {
    apply();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    if (message.find(path) != std::string::npos) throw;
    throw ValueError(str_cat(path, ": ", message));
  }
}

std::string fp8_state_file(int rank, int world_size) {
  return world_size == 1 ? std::string("fp8_state.safetensors")
                         : str_cat("fp8_state-rank-", rank, "-of-", world_size, ".safetensors");
}

CheckpointContents read_checkpoint(const std::string& dir, bool needs_scaler, Device device,
                                   bool adapter, const std::string& optimizer_file,
                                   const std::string& fp8_file) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) {
    throw ValueError(str_cat("resume_from_checkpoint: '", dir, "' is not a directory"));
  }
  CheckpointContents contents;
  contents.dir = dir;
  // PEFT's file names (peft/lora_model.h's kAdapterConfigFile, kAdapterWeightsFile).
  const char* config_name = adapter ? "adapter_config.json" : "config.json";
  const char* weights_name = adapter ? "adapter_model.safetensors" : kSafetensorsWeightsName;
  for (const std::string& name :
       {std::string(config_name), std::string(weights_name), optimizer_file,
        std::string(kSchedulerFile), std::string(kRngStateFile), std::string(kTrainerStateFile)}) {
    require_file(root / name);
  }
  if (needs_scaler) require_file(root / kScalerFile);
  if (!verify_checkpoint_checksums(dir)) {
    std::fprintf(stderr,
                 "warning: %s has no %s (saved before headroom kept checksums): its files "
                 "are not verified\n",
                 dir.c_str(), kChecksumsFile);
  }

  contents.weights = std::make_unique<SafetensorsCheckpoint>((root / weights_name).string());

  const std::string optimizer_path = (root / optimizer_file).string();
  SafetensorsFile optimizer(optimizer_path);
  const auto meta = optimizer.metadata().find(kOptimizerMetaKey);
  if (meta == optimizer.metadata().end()) {
    throw ValueError(str_cat(optimizer_path, ": no '", kOptimizerMetaKey, "' metadata"));
  }
  contents.optimizer.meta = parse_json(meta->second, str_cat(optimizer_path, " metadata"));
  for (const std::string& name : optimizer.names()) {
    contents.optimizer.tensors.emplace_back(name, optimizer.load(name, device));
  }

  if (const fs::path fp8_path = root / fp8_file; fs::exists(fp8_path)) {
    SafetensorsFile fp8(fp8_path.string());
    auto& [tensors, metadata] = contents.fp8_state.emplace();
    for (const std::string& name : fp8.names()) tensors.emplace_back(name, fp8.load(name));
    metadata = fp8.metadata();
  }

  contents.scheduler = read_json_file(root / kSchedulerFile);
  if (needs_scaler) contents.scaler = read_json_file(root / kScalerFile);

  const fs::path rng_path = root / kRngStateFile;
  contents.rng_state = read_json_file(rng_path);
  with_checkpoint_file(rng_path.string(), [&] {
    const nlohmann::json& generator = contents.rng_state.at("generator");
    for (const char* key : {"seed", "offset"}) {
      if (!generator.at(key).is_number_unsigned()) {
        throw ValueError(str_cat("generator.", key, ": ", generator.at(key).dump(),
                                 " is not an integer in 0..2^64-1"));
      }
    }
    (void)contents.rng_state.at("data");
  });

  if (const fs::path config_path = root / kTrainingConfigFile; fs::exists(config_path)) {
    contents.training_config =
        parse_training_config_fields(read_text_file(config_path.string()), config_path.string());
  }

  const fs::path state_path = root / kTrainerStateFile;
  const std::string state_text = read_text_file(state_path.string());
  contents.trainer_state = parse_ordered_json(state_text, state_path.string());
  with_checkpoint_file(state_path.string(), [&] {
    const nlohmann::json& state = contents.trainer_state;
    if (!state.is_object() || !state.contains("global_step") ||
        !state["global_step"].is_number_integer() || state["global_step"].get<int64_t>() < 0) {
      throw ValueError("global_step: missing or not an integer >= 0");
    }
    if (!state.contains("log_history") || !state["log_history"].is_array()) {
      throw ValueError("log_history: missing or not an array");
    }
    check_log_history(state["log_history"], state["global_step"].get<int64_t>());
    if (state.contains("headroom")) check_trainer_state_extra(state["headroom"]);
  });
  return contents;
}

}  // namespace headroom

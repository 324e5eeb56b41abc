// Checkpoint directories: atomic commit, rotation, discovery and checked reading.
#include "train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <system_error>

#include "core/error.h"
#include "core/text_value.h"
#include "io/json_file.h"

namespace headroom {

namespace fs = std::filesystem;

namespace {

// Makes a rename or a new entry in `dir` durable. File systems that cannot fsync a directory
// (EINVAL, EROFS) are let be, as write_file_atomically does.
void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) {
    throw Error(str_cat("checkpoint: cannot open directory '", dir.string(),
                        "' to fsync it: ", std::generic_category().message(errno)));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) {
    throw Error(str_cat("checkpoint: fsync of directory '", dir.string(),
                        "' failed: ", std::generic_category().message(err)));
  }
}

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

void require_file(const fs::path& path) {
  if (!fs::is_regular_file(path)) {
    throw ValueError(str_cat(path.string(), ": missing from the checkpoint"));
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

std::string commit_checkpoint(const std::string& output_dir, int64_t step,
                              const std::function<void(const std::string& dir)>& write_files) {
  const fs::path out(output_dir);
  fs::create_directories(out);
  const fs::path final_dir = out / str_cat(kCheckpointPrefix, step);
  // The pid keeps two processes writing into one output_dir off each other's directory.
  const fs::path tmp_dir = out / str_cat("tmp-", kCheckpointPrefix, step, "-", ::getpid());
  fs::remove_all(tmp_dir);
  fs::create_directory(tmp_dir);
  try {
    write_files(tmp_dir.string());
    fsync_directory(tmp_dir);
    // A directory cannot be renamed over a non-empty one: the old checkpoint of this step (a run
    // resumed before it) goes first; until the rename, only the temporary copy exists.
    if (fs::exists(final_dir)) fs::remove_all(final_dir);
    fs::rename(tmp_dir, final_dir);
    fsync_directory(out);
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
    fs::remove_all(checkpoints[static_cast<size_t>(i)].second);
    deleted.push_back(checkpoints[static_cast<size_t>(i)].second);
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

CheckpointContents read_checkpoint(const std::string& dir, bool needs_scaler, Device device,
                                   bool adapter) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) {
    throw ValueError(str_cat("resume_from_checkpoint: '", dir, "' is not a directory"));
  }
  CheckpointContents contents;
  contents.dir = dir;
  // PEFT's file names (peft/lora_model.h's kAdapterConfigFile, kAdapterWeightsFile).
  const char* config_name = adapter ? "adapter_config.json" : "config.json";
  const char* weights_name = adapter ? "adapter_model.safetensors" : kSafetensorsWeightsName;
  for (const char* name : {config_name, weights_name, kOptimizerFile, kSchedulerFile,
                           kRngStateFile, kTrainerStateFile}) {
    require_file(root / name);
  }
  if (needs_scaler) require_file(root / kScalerFile);

  contents.weights = std::make_unique<SafetensorsCheckpoint>((root / weights_name).string());

  const std::string optimizer_path = (root / kOptimizerFile).string();
  SafetensorsFile optimizer_file(optimizer_path);
  const auto meta = optimizer_file.metadata().find(kOptimizerMetaKey);
  if (meta == optimizer_file.metadata().end()) {
    throw ValueError(str_cat(optimizer_path, ": no '", kOptimizerMetaKey, "' metadata"));
  }
  contents.optimizer.meta = parse_json(meta->second, str_cat(optimizer_path, " metadata"));
  for (const std::string& name : optimizer_file.names()) {
    contents.optimizer.tensors.emplace_back(name, optimizer_file.load(name, device));
  }

  contents.scheduler = read_json_file(root / kSchedulerFile);
  if (needs_scaler) contents.scaler = read_json_file(root / kScalerFile);

  const fs::path rng_path = root / kRngStateFile;
  contents.rng_state = read_json_file(rng_path);
  with_checkpoint_file(rng_path.string(), [&] {
    const nlohmann::json& generator = contents.rng_state.at("generator");
    (void)generator.at("seed").get<uint64_t>();
    (void)generator.at("offset").get<uint64_t>();
    (void)contents.rng_state.at("data");
  });

  const fs::path state_path = root / kTrainerStateFile;
  const std::string state_text = read_text_file(state_path.string());
  (void)parse_json(state_text, state_path.string());  // its errors name the file
  contents.trainer_state = nlohmann::ordered_json::parse(state_text);
  with_checkpoint_file(state_path.string(), [&] {
    const nlohmann::json& state = contents.trainer_state;
    if (!state.is_object() || !state.contains("global_step") ||
        !state["global_step"].is_number_integer() || state["global_step"].get<int64_t>() < 0) {
      throw ValueError("global_step: missing or not an integer >= 0");
    }
    if (!state.contains("log_history") || !state["log_history"].is_array()) {
      throw ValueError("log_history: missing or not an array");
    }
  });
  return contents;
}

}  // namespace headroom

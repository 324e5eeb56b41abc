// `--deepspeed FILE`: the parts of a DeepSpeed JSON config that headroom honours (the ZeRO stage,
// optimizer and parameter offload), and the names of the keys it does not, for a warning.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace headroom {

struct DeepSpeedConfig {
  std::optional<int64_t> zero_stage;  // zero_optimization.stage
  // zero_optimization.offload_optimizer {device: cpu|none, pin_memory, ratio}
  std::optional<bool> offload_optimizer;
  std::optional<double> offload_optimizer_ratio;
  std::optional<bool> offload_optimizer_pin_memory;
  // zero_optimization.offload_param {device: cpu|none, pin_memory}
  std::optional<bool> offload_param;
  std::optional<bool> offload_param_pin_memory;
  // Keys present that headroom does not act on ("train_batch_size", "zero_optimization.
  // overlap_comm", "offload_optimizer.buffer_count", ...): its own options set those.
  std::vector<std::string> ignored_keys;
};

// Reads `path`. ValueError naming the file, key and value for a value of the wrong type or an
// offload device other than cpu / none (NotImplementedError for nvme).
DeepSpeedConfig read_deepspeed_config(const std::string& path);

// "warning: FILE: headroom does not honour a, b.c (...)", or "" when every key is honoured.
std::string deepspeed_ignored_keys_warning(const std::string& path, const DeepSpeedConfig& config);

}  // namespace headroom

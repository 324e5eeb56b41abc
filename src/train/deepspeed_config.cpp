// Reading DeepSpeed's JSON config: stage, offload_optimizer, offload_param.
#include "train/deepspeed_config.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"

namespace headroom {
namespace {

using nlohmann::json;

std::optional<bool> read_bool(const json& section, const std::string& key, const std::string& path,
                              const std::string& where) {
  if (!section.contains(key)) return std::nullopt;
  const json& value = section[key];
  if (!value.is_boolean()) {
    throw ValueError(
        str_cat(path, ": ", where, ".", key, " is ", describe_json(value), ", not true or false"));
  }
  return value.get<bool>();
}

// An offload section: {"device": "cpu" | "none" | "nvme", "pin_memory": bool, ...}; true when
// it offloads to the CPU. `honoured` are its keys that headroom reads.
bool read_offload(const json& section, const std::string& path, const std::string& where,
                  const std::vector<std::string>& honoured, std::vector<std::string>& ignored) {
  if (!section.is_object()) {
    throw ValueError(str_cat(path, ": ", where, " is ", describe_json(section), ", not an object"));
  }
  for (const auto& [key, value] : section.items()) {
    if (std::find(honoured.begin(), honoured.end(), key) == honoured.end()) {
      ignored.push_back(str_cat(where, ".", key));
    }
  }
  // Checked before it is read: value() of a number throws nlohmann's type_error, which names
  // neither the file nor the key.
  if (section.contains("device") && !section["device"].is_string()) {
    throw ValueError(str_cat(path, ": ", where, ".device is ", describe_json(section["device"]),
                             ", not a string"));
  }
  const std::string device = section.value("device", std::string("none"));
  if (device == "nvme") {
    throw NotImplementedError(str_cat(path, ": ", where,
                                      ".device nvme: headroom offloads to "
                                      "host memory only (device cpu)"));
  }
  if (device != "cpu" && device != "none") {
    throw ValueError(str_cat(path, ": ", where, ".device is '", device, "', not cpu or none"));
  }
  return device == "cpu";
}

}  // namespace

DeepSpeedConfig read_deepspeed_config(const std::string& path) {
  const json config = parse_json(read_text_file(path), path);
  if (!config.is_object()) {
    throw ValueError(
        str_cat(path, ": the DeepSpeed config is ", describe_json(config), ", not a JSON object"));
  }
  DeepSpeedConfig out;
  for (const auto& [key, value] : config.items()) {
    if (key != "zero_optimization") out.ignored_keys.push_back(key);
  }
  if (!config.contains("zero_optimization")) return out;
  const json& zero = config["zero_optimization"];
  if (!zero.is_object()) {
    throw ValueError(
        str_cat(path, ": zero_optimization is ", describe_json(zero), ", not an object"));
  }
  for (const auto& [key, value] : zero.items()) {
    if (key != "stage" && key != "offload_optimizer" && key != "offload_param") {
      out.ignored_keys.push_back("zero_optimization." + key);
    }
  }
  if (zero.contains("stage")) {
    if (!zero["stage"].is_number_integer()) {
      throw ValueError(str_cat(path, ": zero_optimization.stage is ", describe_json(zero["stage"]),
                               ", not an integer"));
    }
    out.zero_stage = zero["stage"].get<int64_t>();
  }
  if (zero.contains("offload_optimizer")) {
    const json& section = zero["offload_optimizer"];
    const std::string where = "zero_optimization.offload_optimizer";
    out.offload_optimizer =
        read_offload(section, path, where, {"device", "pin_memory", "ratio"}, out.ignored_keys);
    out.offload_optimizer_pin_memory = read_bool(section, "pin_memory", path, where);
    if (section.contains("ratio")) {
      const json& ratio = section["ratio"];
      if (!ratio.is_number() || !(ratio.get<double>() >= 0.0 && ratio.get<double>() <= 1.0)) {
        throw ValueError(str_cat(path, ": ", where, ".ratio is ", describe_json(ratio),
                                 ", not a number in [0, 1]"));
      }
      out.offload_optimizer_ratio = ratio.get<double>();
    }
  }
  if (zero.contains("offload_param")) {
    const json& section = zero["offload_param"];
    const std::string where = "zero_optimization.offload_param";
    out.offload_param =
        read_offload(section, path, where, {"device", "pin_memory"}, out.ignored_keys);
    out.offload_param_pin_memory = read_bool(section, "pin_memory", path, where);
  }
  return out;
}

std::string deepspeed_ignored_keys_warning(const std::string& path, const DeepSpeedConfig& config) {
  if (config.ignored_keys.empty()) return "";
  std::string keys;
  for (const std::string& key : config.ignored_keys) keys += (keys.empty() ? "" : ", ") + key;
  return str_cat("warning: ", path, ": headroom does not honour ", keys,
                 " (it reads zero_optimization.stage, offload_optimizer and offload_param; set "
                 "the rest with its own options, e.g. --per_device_train_batch_size, --bf16, "
                 "--optim)");
}

}  // namespace headroom

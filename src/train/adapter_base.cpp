// adapter_base.json: the base an adapter was trained on, written, read, and compared.
#include "train/adapter_base.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/json_file.h"
#include "io/safetensors.h"
#include "nn/model_presets.h"
#include "quant/quant_4bit.h"
#include "train/checksums.h"
#include "train/training_arguments.h"

namespace headroom {

namespace fs = std::filesystem;

namespace {

// config.json and the weights transformers would read: model.safetensors when present, else
// the index and every shard it names.
std::vector<std::string> base_file_names(const fs::path& dir) {
  std::vector<std::string> names = {"config.json"};
  if (fs::exists(dir / kSafetensorsWeightsName) || fs::exists(dir / kSafetensorsIndexName)) {
    const SafetensorsCheckpoint weights(dir.string());
    if (weights.is_sharded()) names.push_back(kSafetensorsIndexName);
    std::set<std::string> shards;
    for (const SafetensorsFile& file : weights.files()) {
      shards.insert(fs::path(file.path()).filename().string());
    }
    names.insert(names.end(), shards.begin(), shards.end());
  }
  return names;
}

nlohmann::ordered_json quant_json(const Quant4bitConfig& q) {
  return {{"bnb_4bit_quant_type", quant_4bit_type_name(q.quant_type)},
          {"bnb_4bit_use_double_quant", q.double_quant},
          {"bnb_4bit_compute_dtype", dtype_name(q.compute_dtype)},
          {"bnb_4bit_quant_storage", dtype_name(q.quant_storage)},
          {"blocksize", q.blocksize}};
}

// How a base's precision reads in a refusal.
std::string describe_quant(const std::optional<Quant4bitConfig>& q) {
  if (!q) return "a full-precision base";
  return str_cat("a 4-bit base (", quant_4bit_type_name(q->quant_type),
                 q->double_quant ? ", double quantization" : "", ", compute ",
                 dtype_name(q->compute_dtype), ", storage ", dtype_name(q->quant_storage),
                 ", blocks of ", q->blocksize, ")");
}

// Typed reads of the record's fields; ValueError naming the file and the field.
class RecordReader {
 public:
  explicit RecordReader(std::string source) : source_(std::move(source)) {}

  const nlohmann::json& field(const nlohmann::json& object, const char* key) const {
    if (!object.is_object() || !object.contains(key)) fail(key, "is missing");
    return object.at(key);
  }
  std::string string(const nlohmann::json& object, const char* key) const {
    const nlohmann::json& v = field(object, key);
    if (!v.is_string()) fail(key, str_cat("is ", describe_json(v), ", not a string"));
    return v.get<std::string>();
  }
  bool boolean(const nlohmann::json& object, const char* key) const {
    const nlohmann::json& v = field(object, key);
    if (!v.is_boolean()) fail(key, str_cat("is ", describe_json(v), ", not true or false"));
    return v.get<bool>();
  }
  uint64_t unsigned_integer(const nlohmann::json& object, const char* key) const {
    const nlohmann::json& v = field(object, key);
    if (!v.is_number_unsigned()) {
      fail(key, str_cat("is ", describe_json(v), ", not a non-negative integer"));
    }
    return v.get<uint64_t>();
  }
  DType dtype(const nlohmann::json& object, const char* key) const {
    const std::string name = string(object, key);
    try {
      return dtype_from_name(name);
    } catch (const ValueError& e) {
      fail(key, e.what());
    }
  }
  std::vector<std::string> strings(const nlohmann::json& object, const char* key) const {
    const nlohmann::json& v = field(object, key);
    std::vector<std::string> out;
    if (!v.is_array()) fail(key, str_cat("is ", describe_json(v), ", not an array of strings"));
    for (const nlohmann::json& item : v) {
      if (!item.is_string()) fail(key, str_cat("holds ", describe_json(item), ", not a string"));
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  [[noreturn]] void fail(const char* key, const std::string& why) const {
    throw ValueError(str_cat(source_, ": \"", key, "\" ", why));
  }

 private:
  std::string source_;
};

}  // namespace

AdapterBase describe_adapter_base(const std::string& model, uint64_t seed, const LoadOptions& load,
                                  bool read_files) {
  AdapterBase base;
  base.model = model;
  base.seed = seed;
  base.dtype = load.dtype;
  base.frozen_linear_dtype = load.frozen_linear_dtype;
  base.keep_modules = load.keep_modules;
  base.load_in_4bit = load.load_in_4bit;
  base.skip_modules = load.skip_modules;
  if (find_model_preset(model)) {
    base.preset = true;
    return base;
  }
  const fs::path dir(model);
  if (!fs::is_directory(dir)) {
    throw ValueError(str_cat("model: '", model, "' is neither a preset nor a model directory"));
  }
  std::error_code ec;
  const fs::path absolute = fs::weakly_canonical(fs::absolute(dir), ec);
  base.path = (ec ? fs::absolute(dir) : absolute).lexically_normal().string();
  const std::vector<std::string> names = base_file_names(dir);
  base.weights_loaded = names.size() > 1;
  if (!read_files) return base;
  for (const std::string& name : names) {
    const fs::path file = dir / name;
    base.files.push_back(
        {name, static_cast<uint64_t>(fs::file_size(file)), file_crc32c(file.string())});
  }
  return base;
}

LoadOptions adapter_base_load_options(const AdapterBase& base) {
  LoadOptions load;
  load.dtype = base.dtype;
  load.frozen_linear_dtype = base.frozen_linear_dtype;
  load.keep_modules = base.keep_modules;
  load.load_in_4bit = base.load_in_4bit;
  load.skip_modules = base.skip_modules;
  return load;
}

void write_adapter_base(const std::string& dir, const AdapterBase& base) {
  nlohmann::ordered_json j;
  j["model"] = base.model;
  j["kind"] = base.preset ? "preset" : "directory";
  if (!base.preset) j["path"] = base.path;
  j["seed"] = base.seed;
  j["weights_loaded"] = base.weights_loaded;
  nlohmann::ordered_json files = nlohmann::ordered_json::array();
  for (const BaseFileDigest& f : base.files) {
    files.push_back({{"name", f.name}, {"bytes", f.bytes}, {"crc32c", crc32c_hex(f.crc32c)}});
  }
  j["files"] = files;
  j["dtype"] = dtype_name(base.dtype);
  j["frozen_linear_dtype"] = base.frozen_linear_dtype
                                 ? nlohmann::ordered_json(dtype_name(*base.frozen_linear_dtype))
                                 : nlohmann::ordered_json(nullptr);
  j["keep_modules"] = base.keep_modules;
  j["load_in_4bit"] =
      base.load_in_4bit ? quant_json(*base.load_in_4bit) : nlohmann::ordered_json(nullptr);
  j["skip_modules"] = base.skip_modules;
  write_file_atomically((fs::path(dir) / kAdapterBaseFile).string(), j.dump(2) + "\n");
}

std::optional<AdapterBase> read_adapter_base(const std::string& dir) {
  const fs::path path = fs::path(dir) / kAdapterBaseFile;
  if (!fs::exists(path)) return std::nullopt;
  const nlohmann::json j = parse_json(read_text_file(path.string()), path.string());
  const RecordReader r(path.string());
  if (!j.is_object()) throw ValueError(str_cat(path.string(), ": expected a JSON object"));
  AdapterBase base;
  base.model = r.string(j, "model");
  const std::string kind = r.string(j, "kind");
  if (kind != "preset" && kind != "directory") {
    r.fail("kind", str_cat("is '", kind, "' (expected \"preset\" or \"directory\")"));
  }
  base.preset = kind == "preset";
  if (!base.preset) base.path = r.string(j, "path");
  base.seed = r.unsigned_integer(j, "seed");
  base.weights_loaded = r.boolean(j, "weights_loaded");
  const nlohmann::json& files = r.field(j, "files");
  if (!files.is_array()) r.fail("files", "is not an array");
  for (const nlohmann::json& f : files) {
    BaseFileDigest digest;
    digest.name = r.string(f, "name");
    digest.bytes = r.unsigned_integer(f, "bytes");
    const std::string crc = r.string(f, "crc32c");
    if (crc.size() != 8 || crc.find_first_not_of("0123456789abcdef") != std::string::npos) {
      r.fail("crc32c", str_cat("of '", digest.name, "' is '", crc, "' (expected 8 hex digits)"));
    }
    digest.crc32c = static_cast<uint32_t>(std::stoul(crc, nullptr, 16));
    base.files.push_back(digest);
  }
  base.dtype = r.dtype(j, "dtype");
  if (!r.field(j, "frozen_linear_dtype").is_null()) {
    base.frozen_linear_dtype = r.dtype(j, "frozen_linear_dtype");
  }
  base.keep_modules = r.strings(j, "keep_modules");
  const nlohmann::json& q = r.field(j, "load_in_4bit");
  if (!q.is_null()) {
    Quant4bitConfig config;
    try {
      config.quant_type =
          parse_quant_4bit_type(r.string(q, "bnb_4bit_quant_type"), "bnb_4bit_quant_type");
    } catch (const ValueError& e) {
      r.fail("load_in_4bit", e.what());
    }
    config.double_quant = r.boolean(q, "bnb_4bit_use_double_quant");
    config.compute_dtype = r.dtype(q, "bnb_4bit_compute_dtype");
    config.quant_storage = r.dtype(q, "bnb_4bit_quant_storage");
    config.blocksize = static_cast<int64_t>(r.unsigned_integer(q, "blocksize"));
    check_quant_4bit_config(config, str_cat(path.string(), ": load_in_4bit"));
    base.load_in_4bit = config;
  }
  base.skip_modules = r.strings(j, "skip_modules");
  return base;
}

void check_adapter_base(const AdapterBase& recorded, const AdapterBase& given,
                        const std::string& source) {
  const std::string& model = given.model;
  auto refuse = [&](const std::string& field, const std::string& trained,
                    const std::string& asked) {
    throw ValueError(str_cat(source, ": ", field, ": the adapter was trained on ", trained,
                             ", not ", asked, " (its deltas belong to those weights)"));
  };
  auto describe = [](const AdapterBase& b, const std::string& name) {
    return str_cat(b.preset ? "preset '" : "directory '", name, "'");
  };
  if (given.preset != recorded.preset || (given.preset && given.model != recorded.model)) {
    refuse("--model", describe(recorded, recorded.model), describe(given, model));
  }
  if (!given.preset) {
    for (const BaseFileDigest& f : recorded.files) {
      auto it = std::find_if(given.files.begin(), given.files.end(),
                             [&](const BaseFileDigest& g) { return g.name == f.name; });
      if (it == given.files.end()) {
        refuse("--model", str_cat("a base with ", f.name, " (", f.bytes, " bytes)"),
               str_cat("'", model, "', which has none"));
      }
      if (!(*it == f)) {
        refuse(
            "--model",
            str_cat("a ", f.name, " of ", f.bytes, " bytes, CRC-32C ", crc32c_hex(f.crc32c)),
            str_cat("'", model, "'s of ", it->bytes, " bytes, CRC-32C ", crc32c_hex(it->crc32c)));
      }
    }
    if (given.files.size() != recorded.files.size()) {
      refuse("--model", str_cat(recorded.files.size() - 1, " weights files"),
             str_cat("'", model, "' with ", given.files.size() - 1));
    }
  }
  // The seed makes the weights of a preset or of a directory without them.
  if (!recorded.weights_loaded && given.seed != recorded.seed) {
    refuse("--seed", str_cat("weights drawn with seed ", recorded.seed),
           str_cat("seed ", given.seed));
  }
  if (given.load_in_4bit != recorded.load_in_4bit) {
    refuse("--load_in_4bit", describe_quant(recorded.load_in_4bit),
           describe_quant(given.load_in_4bit));
  }
  // A resume under another precision recipe (eval and merge take the record's).
  auto precision = [](const AdapterBase& b) {
    const std::string frozen = b.frozen_linear_dtype ? str_cat(" with the frozen projections in ",
                                                               dtype_name(*b.frozen_linear_dtype))
                                                     : std::string();
    return str_cat("a base in ", dtype_name(b.dtype), frozen);
  };
  if (given.dtype != recorded.dtype || given.frozen_linear_dtype != recorded.frozen_linear_dtype) {
    refuse("precision", precision(recorded), precision(given));
  }
}

AdapterBase resolve_adapter_base(const AdapterBaseRequest& request,
                                 const std::string& adapter_dir) {
  const std::optional<AdapterBase> recorded =
      adapter_dir.empty() ? std::nullopt : read_adapter_base(adapter_dir);
  const std::string source =
      recorded ? (fs::path(adapter_dir) / kAdapterBaseFile).string() : std::string();
  std::string model = request.model;
  if (model.empty()) {
    if (!recorded) {
      throw ValueError(adapter_dir.empty()
                           ? std::string("--model: required")
                           : str_cat("--model: required (", adapter_dir, " has no ",
                                     kAdapterBaseFile, " naming the base it was trained on)"));
    }
    model = recorded->preset ? recorded->model : recorded->path;
    if (!recorded->preset && !fs::is_directory(model)) {
      throw ValueError(
          str_cat(source, ": the base '", model, "' is no longer there; give its copy as --model"));
    }
  }
  // The 4-bit settings asked for: the record's (or bitsandbytes' defaults) with the options
  // given over them.
  std::optional<Quant4bitConfig> quant = recorded ? recorded->load_in_4bit : std::nullopt;
  if (request.load_in_4bit) {
    quant = *request.load_in_4bit ? quant.value_or(Quant4bitConfig{})
                                  : std::optional<Quant4bitConfig>();
  }
  const bool bnb_given =
      request.quant_type || request.double_quant || request.compute_dtype || request.quant_storage;
  if (bnb_given && !quant) {
    throw ValueError(
        "--bnb_4bit_*: given for a base that is not loaded in 4 bits (add "
        "--load_in_4bit true)");
  }
  if (quant) {
    if (request.quant_type) quant->quant_type = *request.quant_type;
    if (request.double_quant) quant->double_quant = *request.double_quant;
    if (request.compute_dtype) quant->compute_dtype = *request.compute_dtype;
    if (request.quant_storage) quant->quant_storage = *request.quant_storage;
    check_quant_4bit_config(*quant, "--load_in_4bit");
  }
  LoadOptions load = recorded ? adapter_base_load_options(*recorded) : LoadOptions{};
  load.load_in_4bit = quant;
  const uint64_t seed = request.seed.value_or(
      recorded ? recorded->seed : static_cast<uint64_t>(TrainingArguments{}.seed));
  // Without a record nothing is compared: the files are not read for it.
  AdapterBase given = describe_adapter_base(model, seed, load, recorded.has_value());
  if (!recorded) return given;

  check_adapter_base(*recorded, given, source);
  return given;
}

ModelAndTokenizer load_adapter_base(const AdapterBase& base, Device device) {
  return load_model_and_tokenizer(base.model, device, base.seed, adapter_base_load_options(base));
}

}  // namespace headroom

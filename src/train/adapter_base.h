// What a LoRA adapter was trained on: the base model, its seed, dtype and 4-bit settings, which
// training records beside the adapter (adapter_base.json) and eval and merge rebuild exactly,
// refusing a base that differs. PEFT's adapter_config.json names the base only by its path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "io/pretrained.h"
#include "train/model_source.h"

namespace headroom {

inline constexpr const char* kAdapterBaseFile = "adapter_base.json";

// A file of a directory base: config.json or a weights file, by its content.
struct BaseFileDigest {
  std::string name;  // relative to the directory
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  bool operator==(const BaseFileDigest&) const = default;
};

// Note [The base of an adapter]
// An adapter's deltas mean something only on the weights they were trained against. A preset
// or a directory without weights is drawn by HF's init from the run's seed (train's --seed,
// default 42), and made in the run's dtype: under autocast LoRA the frozen projections are
// rounded to the compute dtype once loaded (Note [A frozen base in the compute dtype]), and a
// QLoRA base is quantized with its bnb settings. Eval or merge on another seed, in fp32 or in
// full precision scores or merges a different model and says nothing (a preset's eval: 5.546
// against training's 4.955). So training writes these facts; eval and merge load with them and
// compare what they are given: a directory by the size and CRC-32C of config.json and each
// weights file (it may have moved), a preset by its name.
struct AdapterBase {
  std::string model;                  // --model as training was given it
  bool preset = false;                // a preset name, else a directory
  std::string path;                   // the directory, absolute; empty for a preset
  uint64_t seed = 0;                  // HF's init's seed
  bool weights_loaded = false;        // a directory with weights: the seed does not enter them
  std::vector<BaseFileDigest> files;  // a directory's config.json and weights files
  DType dtype = DType::f32;           // LoadOptions.dtype
  std::optional<DType> frozen_linear_dtype;
  std::vector<std::string> keep_modules;
  std::optional<Quant4bitConfig> load_in_4bit;
  std::vector<std::string> skip_modules;
};

// The base `model` (a preset or a directory) loaded with `seed` and `load`, described; with
// `read_files`, a directory's files are read for their checksums (else `files` stays empty).
// ValueError when `model` is neither.
AdapterBase describe_adapter_base(const std::string& model, uint64_t seed, const LoadOptions& load,
                                  bool read_files = true);

// The LoadOptions that make the recorded base (dtype, frozen projections, 4-bit).
LoadOptions adapter_base_load_options(const AdapterBase& base);

// Writes dir/adapter_base.json (atomically).
void write_adapter_base(const std::string& dir, const AdapterBase& base);

// dir/adapter_base.json, or nullopt when the adapter has none (PEFT's, or one saved before
// headroom kept it). ValueError naming the file and the field when it is malformed.
std::optional<AdapterBase> read_adapter_base(const std::string& dir);

// What eval and merge are asked for: each field unset takes the record's (or, for an adapter
// without one, train's defaults: seed 42, full precision, bitsandbytes' 4-bit defaults).
struct AdapterBaseRequest {
  std::string model;                 // --model; empty: the record's
  std::optional<uint64_t> seed;      // --seed
  std::optional<bool> load_in_4bit;  // --load_in_4bit
  // The bnb options; given with a 4-bit base only (asked for or recorded).
  std::optional<Quant4bitType> quant_type;
  std::optional<bool> double_quant;
  std::optional<DType> compute_dtype;
  std::optional<DType> quant_storage;
};

// The request for `model` with every other field unset.
inline AdapterBaseRequest base_request(std::string model) {
  AdapterBaseRequest request;
  request.model = std::move(model);
  return request;
}

// ValueError "<source>: <field>: the adapter was trained on <recorded's>, not <given's>" when
// `given` is another base than `recorded`: another preset, another directory's contents (a
// file's size or CRC-32C), another seed where the seed draws the weights, another 4-bit setting.
void check_adapter_base(const AdapterBase& recorded, const AdapterBase& given,
                        const std::string& source);

// The base to build for `request` and the adapter in `adapter_dir` (may be empty: no adapter).
// ValueError naming the adapter's record, the field and both values when the request's base
// differs from the recorded one (another preset or seed, another directory's contents, 4-bit
// on or off or other bnb settings), and naming --model when none is given and none recorded.
AdapterBase resolve_adapter_base(const AdapterBaseRequest& request, const std::string& adapter_dir);

// The base made on `device` as described: load_model_and_tokenizer with its seed and options.
ModelAndTokenizer load_adapter_base(const AdapterBase& base, Device device);

}  // namespace headroom

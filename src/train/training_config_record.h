// training_config.json: the resolved configuration a checkpoint was saved with, each field marked
// with whether it changes the training's mathematics, and a resume's comparison with it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/hf_config.h"
#include "peft/lora_config.h"
#include "train/training_config.h"

namespace headroom {

inline constexpr const char* kTrainingConfigFile = "training_config.json";

// Note [What a resume may change]
// A resume continues the run a checkpoint was saved from, so what changes the mathematics of a
// step must be the checkpoint's: the optimizer and its hyperparameters, the schedule and its
// warmup, the precision recipe, the batch (per-device size, accumulation, sequence length, the
// eval split, drop_last), the seeds, clipping, NEFTune, LoRA, the 4-bit base, FP8 and the model's
// config.json. A resume that changes one is refused naming the field and both values. What only
// decides how the run is watched, saved, paced or placed may change: logging, evaluation, saving,
// paths, the profiler, the data loader's workers (Note [DataLoader determinism]), the device,
// memory caps, offload, ZeRO's stage (Note [ZeRO checkpoints]) and activation checkpointing,
// whose recompute is bit-identical (Note [Activation checkpointing], and the tests of
// memsave/test_gradient_checkpointing.cpp). So may the run's length (max_steps,
// num_train_epochs), as HF lets it: the rest of the schedule follows the new length, and a
// length below the checkpoint's step is refused by the resume itself. The paths of the model and
// the data may change too (a directory may move): the model is compared by its config.json (and
// an adapter's base by adapter_base.json's digests), the data by the loader's state (its
// sequences' count and length, rng_state.json). Each field of TrainingArguments and
// TrainingConfig is classified in training_config_record, whose structured bindings name every
// one of them: a field added to either struct fails to compile until it is classified there.
// A checkpoint saved before headroom wrote the file resumes with the older checks alone
// (adapter_config.json's LoRA options, compared by the same rule; adapter_base.json; the FP8
// state's recipe; the ZeRO manifest).

// What a resume may do with a field that differs from the checkpoint's.
enum class ResumeRule {
  must_match,  // it changes the mathematics
  may_change,
};

struct ConfigField {
  std::string name;  // the option's name (HF's, TRL's), or model_config
  // The resolved value: the recipe a precision option makes, the optimizer `optim` names, the
  // LoRA targets with the architecture's default filled in; null where the option is off.
  nlohmann::ordered_json value;
  ResumeRule rule = ResumeRule::must_match;
};

using ConfigRecord = std::vector<ConfigField>;

// Every field of `config`, classified (Note [What a resume may change]); `model` is the built
// model's configuration (the run's model_config, and LoRA's default targets).
ConfigRecord training_config_record(const TrainingConfig& config, const HfConfig& model);

// The LoRA fields of training_config_record alone (use_peft, lora_r, ...): what an older
// checkpoint's adapter_config.json says of them. `lora` unset: a run without LoRA.
ConfigRecord lora_config_record(const std::optional<LoraConfig>& lora, const HfConfig& model);

// training_config.json's text: {"format": 1, "fields": {NAME: {"value": V, "changes_math": B}}}.
std::string training_config_json(const ConfigRecord& record);

// The fields object of a training_config.json (`text`, read from `path`). ValueError naming the
// file and the field when it is not one.
nlohmann::ordered_json parse_training_config_fields(const std::string& text,
                                                    const std::string& path);

// `record` as the fields object parse_training_config_fields returns.
nlohmann::ordered_json config_record_fields(const ConfigRecord& record);

// A resume refused because the run's configuration is not the checkpoint's: every checkpoint of
// the run has the same record, so "last" does not fall back to an older one.
class ResumeConfigError : public ValueError {
 public:
  using ValueError::ValueError;
};

// ResumeConfigError "<source>: learning_rate is 0.003 in the checkpoint and 0.001 in this run;
// ..." naming each field of `run` that must match and differs from `saved`'s (a fields object;
// an object value names the key that differs: model_config.n_embd). The run's rule decides, not
// the file's changes_math (which is there for readers); fields `saved` does not have (options
// newer than the checkpoint) are not compared.
void check_resumed_config(const nlohmann::ordered_json& saved, const ConfigRecord& run,
                          const std::string& source);

}  // namespace headroom

// training_config.json: every field of the run's configuration classified, written with a
// checkpoint and compared on resume (Note [What a resume may change]).
#include "train/training_config_record.h"

#include <algorithm>
#include <utility>

#include "core/json_file.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer_factory.h"

namespace headroom {

namespace {

using Json = nlohmann::ordered_json;

constexpr int kFormat = 1;

class Fields {
 public:
  void must_match(const char* name, Json value) {
    record_.push_back({name, std::move(value), ResumeRule::must_match});
  }
  void may_change(const char* name, Json value) {
    record_.push_back({name, std::move(value), ResumeRule::may_change});
  }
  void append(ConfigRecord fields) {
    for (ConfigField& field : fields) record_.push_back(std::move(field));
  }
  ConfigRecord take() { return std::move(record_); }

 private:
  ConfigRecord record_;
};

template <typename T>
Json or_null(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

// Module names as a set: sorted, once each; an empty target list is the architecture's default.
Json module_names(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return Json(names);
}

Json quant_4bit_json(const Quant4bitConfig& config) {
  // A field added to Quant4bitConfig fails to compile here until it is written.
  const auto& [quant_type, double_quant, compute_dtype, quant_storage, blocksize] = config;
  return {{"bnb_4bit_quant_type", quant_4bit_type_name(quant_type)},
          {"bnb_4bit_use_double_quant", double_quant},
          {"bnb_4bit_compute_dtype", dtype_name(compute_dtype)},
          {"bnb_4bit_quant_storage", dtype_name(quant_storage)},
          {"blocksize", blocksize}};
}

const char* interval_strategy_name(IntervalStrategy strategy) {
  return strategy == IntervalStrategy::steps ? "steps" : "no";
}

// PEFT's init_lora_weights values.
Json lora_init_json(LoraInit init) {
  switch (init) {
    case LoraInit::kaiming:
      return true;
    case LoraInit::gaussian:
      return "gaussian";
    case LoraInit::random:
      return false;
  }
  return true;
}

// The options of TrainingArguments, in its order, each by its resolved value where
// resolve_training_config types it (`optim` as the optimizer it makes, bf16 / fp16 / precision as
// one recipe). See Note [What a resume may change] for the reasons.
void add_option_fields(const TrainingConfig& config, const HfConfig& model_config, Fields& f) {
  // Every option, named: a field added to TrainingArguments fails to compile here until it is
  // classified below.
  const auto& [model, data, output_dir, overwrite_output_dir, device, max_seq_length,
               validation_split_percentage, max_eval_samples, eval_data, dataset_text_field,
               chat_template_path, completion_only_loss, assistant_only_loss, eos_token, packing,
               packing_strategy, padding_free, per_device_train_batch_size,
               per_device_eval_batch_size, auto_find_batch_size, gradient_accumulation_steps,
               max_steps, num_train_epochs, optim, optim_args, learning_rate, weight_decay,
               adam_beta1, adam_beta2, adam_epsilon, max_grad_norm, neftune_noise_alpha,
               lr_scheduler_type, warmup_ratio, warmup_steps, bf16, fp16, precision,
               gradient_checkpointing, gradient_checkpointing_policy, tiled_mlp, tiled_mlp_tokens,
               fp8, fp8_recipe, fp8_format, fp8_amax_history_len, fp8_amax_compute_algo, fp8_margin,
               fp8_save_original_input, use_peft, lora_r, lora_alpha, lora_dropout,
               lora_target_modules, lora_modules_to_save, use_rslora, load_in_4bit,
               bnb_4bit_quant_type, bnb_4bit_use_double_quant, bnb_4bit_compute_dtype,
               bnb_4bit_quant_storage, seed, data_seed, logging_steps, logging_first_step,
               eval_strategy, eval_steps, eval_loss_target, save_strategy, save_steps,
               save_total_limit, resume_from_checkpoint, disable_tqdm, report_to, logging_dir,
               dataloader_num_workers, dataloader_prefetch_factor, dataloader_persistent_workers,
               dataloader_pin_memory, dataloader_drop_last, sample_prompt, sample_max_new_tokens,
               profile, profile_skip_first, profile_wait, profile_warmup, profile_active,
               profile_repeat, memory_snapshot, memory_limit, expandable_segments, zero_stage,
               deepspeed, ddp_bucket_cap_mb, average_tokens_across_devices, offload_optimizer,
               offload_optimizer_ratio, offload_activations, offload_params, offload_pin_memory] =
      config.args;

  // The model by what it builds (model_config, last), not by its path; the data by the loader's
  // state; the device runs the same computation with its own kernels.
  f.may_change("model", model);
  f.may_change("data", data);
  f.may_change("output_dir", output_dir);
  f.may_change("overwrite_output_dir", overwrite_output_dir);
  f.may_change("device", str_cat(config.device));  // device, resolved
  f.must_match("max_seq_length", or_null(max_seq_length));
  f.must_match("validation_split_percentage", validation_split_percentage);  // what trains
  f.may_change("max_eval_samples", or_null(max_eval_samples));
  f.may_change("eval_data", eval_data);
  // What the rows become: other tokens, labels or batches would train on other data.
  f.must_match("dataset_text_field", dataset_text_field);
  f.must_match("chat_template_path", chat_template_path);
  f.must_match("completion_only_loss", or_null(completion_only_loss));
  f.must_match("assistant_only_loss", assistant_only_loss);
  f.must_match("eos_token", eos_token);
  f.must_match("packing", packing);
  f.must_match("packing_strategy", packing_strategy_name(config.packing_strategy));
  f.must_match("padding_free", padding_free);

  f.must_match("per_device_train_batch_size", per_device_train_batch_size);
  f.may_change("per_device_eval_batch_size", per_device_eval_batch_size);
  f.may_change("auto_find_batch_size", auto_find_batch_size);  // what it chose must match
  f.must_match("gradient_accumulation_steps", gradient_accumulation_steps);
  f.may_change("max_steps", max_steps);  // the length: the schedule follows it
  f.may_change("num_train_epochs", num_train_epochs);
  f.may_change("eval_loss_target", eval_loss_target);  // when the run ends

  // The optimizer as the recipe runs it (adamw_torch under pure_bf16: adamw_bf16).
  const OptimizerArguments& o = config.optimizer_arguments;
  f.must_match("optim", optimizer_kind_name(config.optimizer));
  f.must_match("optim_args", Json(parse_optim_args(o.optim_args)));
  f.must_match("learning_rate", o.learning_rate);
  f.must_match("weight_decay", o.weight_decay);
  f.must_match("adam_beta1", o.adam_beta1);
  f.must_match("adam_beta2", o.adam_beta2);
  f.must_match("adam_epsilon", o.adam_epsilon);
  f.must_match("max_grad_norm", max_grad_norm);
  f.must_match("neftune_noise_alpha", neftune_noise_alpha);
  f.must_match("lr_scheduler_type", scheduler_type_name(config.lr_scheduler));
  // warmup_steps > 0 overrides warmup_ratio, which then changes nothing.
  f.must_match("warmup_ratio", warmup_steps > 0 ? Json(nullptr) : Json(warmup_ratio));
  f.must_match("warmup_steps", warmup_steps);

  // bf16, fp16 and precision: one recipe (its Kahan summation included).
  f.must_match("precision", config.recipe.name());
  // gradient_checkpointing and its policy: bit-identical gradients, less memory.
  f.may_change("gradient_checkpointing",
               config.checkpointing ? Json(config.checkpointing->name()) : Json(nullptr));
  // tiled_mlp and its tile: the same MLP, its parameters' gradients summed in another order.
  f.may_change("tiled_mlp", config.mlp_tile_tokens ? Json(*config.mlp_tile_tokens) : Json(nullptr));
  // fp8 and fp8_recipe / fp8_format / fp8_amax_* / fp8_margin: one recipe. Backward's second
  // quantization of the original input is not shown bit-identical to the saved FP8 copy.
  f.must_match("fp8", config.fp8.has_value());
  f.must_match("fp8_recipe", config.fp8 ? Json(config.fp8->describe()) : Json(nullptr));
  f.must_match("fp8_save_original_input",
               config.fp8 ? Json(fp8_save_original_input) : Json(nullptr));
  // use_peft and lora_*.
  f.append(lora_config_record(config.lora, model_config));
  // load_in_4bit and bnb_4bit_*: the base's quantization.
  f.must_match("load_in_4bit",
               config.quant_4bit ? quant_4bit_json(*config.quant_4bit) : Json(nullptr));

  // The weights' init, dropout and the optimizer's rounding stream; the data's order.
  f.must_match("seed", seed);
  f.must_match("data_seed", data_seed.value_or(seed));

  // When the run reports, evaluates (which leaves the training state alone) and saves.
  f.may_change("logging_steps", logging_steps);
  f.may_change("logging_first_step", logging_first_step);
  f.may_change("eval_strategy", interval_strategy_name(config.eval_strategy));
  f.may_change("eval_steps", or_null(eval_steps));
  f.may_change("save_strategy", interval_strategy_name(config.save_strategy));
  f.may_change("save_steps", save_steps);
  f.may_change("save_total_limit", or_null(save_total_limit));
  f.may_change("resume_from_checkpoint", resume_from_checkpoint);
  f.may_change("disable_tqdm", disable_tqdm);
  f.may_change("report_to", report_to);
  f.may_change("logging_dir", logging_dir);

  // The same batches with any workers (Note [DataLoader determinism]); drop_last decides them.
  f.may_change("dataloader_num_workers", dataloader_num_workers);
  f.may_change("dataloader_prefetch_factor", or_null(dataloader_prefetch_factor));
  f.may_change("dataloader_persistent_workers", dataloader_persistent_workers);
  f.may_change("dataloader_pin_memory", dataloader_pin_memory);
  f.must_match("dataloader_drop_last", dataloader_drop_last);

  f.may_change("sample_prompt", sample_prompt);
  f.may_change("sample_max_new_tokens", sample_max_new_tokens);
  f.may_change("profile", profile);
  f.may_change("profile_skip_first", profile_skip_first);
  f.may_change("profile_wait", profile_wait);
  f.may_change("profile_warmup", profile_warmup);
  f.may_change("profile_active", profile_active);
  f.may_change("profile_repeat", profile_repeat);
  f.may_change("memory_snapshot", memory_snapshot);
  f.may_change("memory_limit", or_null(config.memory_limit));  // bytes
  f.may_change("expandable_segments", expandable_segments);

  // zero_stage (with the deepspeed file's): ZeRO-1, 2 and 3 resume each other's checkpoints,
  // and the manifest refuses a sharded one without ZeRO (Note [ZeRO checkpoints]).
  f.may_change("zero_stage", config.zero_stage);
  f.may_change("deepspeed", deepspeed);
  f.may_change("ddp_bucket_cap_mb", ddp_bucket_cap_mb);
  f.must_match("average_tokens_across_devices", average_tokens_across_devices);  // the gradients
  // offload_* (with the deepspeed file's): where states live, not what they hold.
  const auto& [off_optimizer, off_ratio, off_activations, off_params, off_pin] = config.offload;
  f.may_change("offload_optimizer", off_optimizer);
  f.may_change("offload_optimizer_ratio", off_ratio);
  f.may_change("offload_activations", off_activations);
  f.may_change("offload_params", off_params);
  f.may_change("offload_pin_memory", off_pin);

  // The architecture the model options build (config.json as HF writes it).
  f.must_match("model_config", Json::parse(to_json(model_config)));
}

// A value as a refusal shows it: strings bare, name lists joined, at most 200 characters (the
// checkpoint's file may be a stranger's).
std::string show_whole(const Json& value) {
  if (value.is_null()) return "unset";
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array() &&
      std::all_of(value.begin(), value.end(), [](const Json& item) { return item.is_string(); })) {
    std::string joined;
    for (const Json& item : value) {
      if (!joined.empty()) joined += ',';
      joined += item.get_ref<const std::string&>();
    }
    return joined.empty() ? std::string("(none)") : joined;
  }
  return value.dump();
}

std::string show(const Json& value) {
  std::string text = show_whole(value);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

// Where `saved` and `run` first differ below `path`: an object by its keys (model_config.n_embd),
// anything else whole.
bool first_difference(const Json& saved, const Json& run, const std::string& path,
                      std::string& where, Json& saved_value, Json& run_value) {
  if (saved.is_object() && run.is_object()) {
    for (const auto& [key, value] : run.items()) {
      const Json missing;
      const auto it = saved.find(key);
      if (first_difference(it == saved.end() ? missing : *it, value, path + "." + key, where,
                           saved_value, run_value)) {
        return true;
      }
    }
    for (const auto& [key, value] : saved.items()) {
      if (!run.contains(key))
        return first_difference(value, Json(), path + "." + key, where, saved_value, run_value);
    }
    return false;
  }
  if (saved == run) return false;
  where = path;
  saved_value = saved;
  run_value = run;
  return true;
}

}  // namespace

ConfigRecord training_config_record(const TrainingConfig& config, const HfConfig& model) {
  // TrainingConfig's fields: the options (args) and what they resolve to, each entered under its
  // option's name by add_option_fields. A field added to TrainingConfig fails to compile here
  // until it is classified there.
  [[maybe_unused]] const auto& [args, device, recipe, checkpointing, mlp_tile_tokens, optimizer,
                                optimizer_arguments, lr_scheduler, lora, quant_4bit, fp8,
                                zero_stage, offload, eval_strategy, save_strategy, memory_limit,
                                packing_strategy] = config;
  // OptimizerArguments, likewise: optim as its kind, kahan_summation in the recipe, seed as seed.
  [[maybe_unused]] const auto& [optim, learning_rate, weight_decay, adam_beta1, adam_beta2,
                                adam_epsilon, optim_args, kahan_summation, optimizer_seed] =
      config.optimizer_arguments;
  Fields f;
  add_option_fields(config, model, f);
  return f.take();
}

ConfigRecord lora_config_record(const std::optional<LoraConfig>& lora, const HfConfig& model) {
  const LoraConfig given = lora.value_or(LoraConfig{});
  // A field added to LoraConfig fails to compile here until it is classified below.
  const auto& [r, lora_alpha, lora_dropout, use_rslora, target_modules, bias, modules_to_save,
               init_lora_weights, base_model_name_or_path, revision] = given;
  auto when_on = [&](Json value) { return lora ? std::move(value) : Json(nullptr); };
  Fields f;
  f.must_match("use_peft", lora.has_value());
  f.must_match("lora_r", when_on(r));
  f.must_match("lora_alpha", when_on(lora_alpha));
  f.must_match("lora_dropout", when_on(lora_dropout));
  f.must_match("use_rslora", when_on(use_rslora));
  f.must_match("lora_target_modules",
               when_on(module_names(target_modules.empty() ? default_lora_target_modules(model)
                                                           : target_modules)));
  f.must_match("lora_modules_to_save", when_on(module_names(modules_to_save)));
  f.must_match("bias", when_on(lora_bias_name(bias)));
  // The adapters' first values and the base's name, which a resume replaces by the checkpoint's
  // (the base itself is compared by adapter_base.json).
  f.may_change("init_lora_weights", when_on(lora_init_json(init_lora_weights)));
  f.may_change("base_model_name_or_path", when_on(base_model_name_or_path));
  f.may_change("revision", when_on(revision));
  return f.take();
}

nlohmann::ordered_json config_record_fields(const ConfigRecord& record) {
  Json fields = Json::object();
  for (const ConfigField& field : record) {
    fields[field.name] = {{"value", field.value},
                          {"changes_math", field.rule == ResumeRule::must_match}};
  }
  return fields;
}

std::string training_config_json(const ConfigRecord& record) {
  const Json file = {{"format", kFormat}, {"fields", config_record_fields(record)}};
  return file.dump(2) + "\n";
}

nlohmann::ordered_json parse_training_config_fields(const std::string& text,
                                                    const std::string& path) {
  const Json file = parse_ordered_json(text, path);
  auto fail = [&](const std::string& what) { throw ValueError(str_cat(path, ": ", what)); };
  if (!file.is_object()) fail(str_cat("expected a JSON object, not ", file.type_name()));
  const auto format = file.find("format");
  if (format == file.end() || !format->is_number_integer() || format->get<int64_t>() != kFormat) {
    fail(str_cat("\"format\" is ", format == file.end() ? "missing" : format->dump(), ", expected ",
                 kFormat));
  }
  const auto fields = file.find("fields");
  if (fields == file.end() || !fields->is_object()) fail("\"fields\" is missing or not an object");
  for (const auto& [name, field] : fields->items()) {
    if (!field.is_object() || !field.contains("value") || !field.contains("changes_math") ||
        !field["changes_math"].is_boolean()) {
      fail(str_cat("\"fields\".", shortened(name), ": ", shortened(field.dump()),
                   " is not {\"value\": ..., \"changes_math\": true or false}"));
    }
  }
  return *fields;
}

void check_resumed_config(const nlohmann::ordered_json& saved, const ConfigRecord& run,
                          const std::string& source) {
  // Every difference at once, so that one edit of the options makes the resume go through.
  std::string differences;
  for (const ConfigField& field : run) {
    if (field.rule != ResumeRule::must_match) continue;
    const auto it = saved.find(field.name);
    if (it == saved.end()) continue;  // an option newer than the checkpoint
    std::string where;
    Json saved_value, run_value;
    if (first_difference(it->at("value"), field.value, field.name, where, saved_value, run_value)) {
      differences += str_cat(where, " is ", show(saved_value), " in the checkpoint and ",
                             show(run_value), " in this run; ");
    }
  }
  if (differences.empty()) return;
  throw ResumeConfigError(str_cat(source, ": ", differences,
                                  "a resume keeps what changes the training's mathematics (resume "
                                  "with the checkpoint's values, or start a new run)"));
}

}  // namespace headroom

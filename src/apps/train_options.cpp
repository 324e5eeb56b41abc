// The table of `headroom train` options over TrainingArguments, value setting from the command line
// and config files, and the checks on the merged arguments.
#include "apps/train_options.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <filesystem>
#include <set>
#include <tuple>

#include "amp/precision.h"
#include "apps/option_value.h"
#include "core/device.h"
#include "core/error.h"
#include "core/json_file.h"
#include "train/deepspeed_config.h"
#include "integrations/report_to.h"
#include "memory/alloc_config.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer_factory.h"
#include "train/trainer.h"

namespace headroom {
namespace {

using A = TrainingArguments;

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::vector<TrainOption> make_train_options() {
  const char* data = "Model and data";
  const char* batches = "Batches and length";
  const char* optimizer = "Optimizer and schedule";
  const char* precision = "Precision and memory";
  const char* logging = "Logging, evaluation, checkpoints";
  const char* peft = "LoRA (PEFT)";
  const char* loading = "Data loading";
  const char* other = "Seeds and the sample";
  const char* profiling = "Profiling";
  return {
      {"model", data, "a preset (gpt2-tiny, gpt2, llama-tiny, ...) or a directory with config.json",
       &A::model},
      {"data", data,
       "the data: a text file (cut into windows), JSONL / JSON rows in TRL's formats, or a "
       "directory of them (train needs it; plan reads rows for their batches' shapes)",
       &A::data},
      {"output_dir", data, "where checkpoints, logs and the loss plot go", &A::output_dir},
      {"overwrite_output_dir", data,
       "delete the checkpoints of an earlier run in output_dir (else a fresh run refuses them)",
       &A::overwrite_output_dir},
      {"device", data,
       "auto (cuda when present and its ops have CUDA kernels, else cpu), cpu, cuda, cuda:N or "
       "meta",
       &A::device},
      {"max_seq_length", data,
       "tokens per sequence (default: the model's context length); rows are truncated to it, "
       "packed rows filled to it",
       &A::max_seq_length, "max_length"},
      {"validation_split_percentage", data, "percent of the data held out for evaluation",
       &A::validation_split_percentage},
      {"max_eval_samples", data,
       "evaluate on the first N sequences of the held-out split (default: all)",
       &A::max_eval_samples},
      {"eval_data", data,
       "held-out rows to evaluate on (JSONL / JSON in the training data's format); default: "
       "the split",
       &A::eval_data},
      {"dataset_text_field", data, "the field of language modeling rows", &A::dataset_text_field},
      {"chat_template_path", data,
       "a Jinja file (or a model directory) whose chat template renders the conversations, "
       "instead of the model's",
       &A::chat_template_path, "chat_template"},
      {"completion_only_loss", data,
       "score only the completion of prompt / completion rows (default: true for them)",
       &A::completion_only_loss},
      {"assistant_only_loss", data,
       "score only the assistant's tokens ({% generation %} in the chat template)",
       &A::assistant_only_loss},
      {"eos_token", data,
       "the text appended to rows that are not conversations (default: the "
       "tokenizer's eos_token)",
       &A::eos_token},
      {"packing", data, "pack rows into sequences of max_length that never attend to each other",
       &A::packing},
      {"packing_strategy", data,
       "bfd (best-fit decreasing, rows cut to max_length), bfd_split (best-fit decreasing, long "
       "rows split into pieces) or wrapped (rows joined and cut)",
       &A::packing_strategy},
      {"padding_free", data, "each batch as one row without padding (always with bfd packing)",
       &A::padding_free},
      {"per_device_train_batch_size", batches, "sequences per micro-batch",
       &A::per_device_train_batch_size},
      {"per_device_eval_batch_size", batches, "sequences per evaluation batch",
       &A::per_device_eval_batch_size},
      {"gradient_accumulation_steps", batches, "micro-batches per optimizer step",
       &A::gradient_accumulation_steps},
      {"auto_find_batch_size", batches,
       "before training, the largest micro-batch that fits (from dry runs under the memory the "
       "run has), with the accumulation raised to keep the effective batch",
       &A::auto_find_batch_size},
      {"max_steps", batches, "optimizer steps; -1: num_train_epochs decides", &A::max_steps},
      {"num_train_epochs", batches, "passes over the data (when max_steps is -1)",
       &A::num_train_epochs},
      {"optim", optimizer, "the optimizer: " + joined(optimizer_names()), &A::optim},
      {"optim_args", optimizer, "extra optimizer options, \"key=value,key=value\"", &A::optim_args},
      {"learning_rate", optimizer, "peak learning rate", &A::learning_rate},
      {"weight_decay", optimizer, "decoupled weight decay (not on biases and norm weights)",
       &A::weight_decay},
      {"adam_beta1", optimizer, "AdamW's beta1", &A::adam_beta1},
      {"adam_beta2", optimizer, "AdamW's beta2", &A::adam_beta2},
      {"adam_epsilon", optimizer, "AdamW's epsilon", &A::adam_epsilon},
      {"max_grad_norm", optimizer, "clip the total gradient norm to this; 0: no clipping",
       &A::max_grad_norm},
      {"neftune_noise_alpha", optimizer,
       "NEFTune: uniform noise of magnitude alpha / sqrt(seq_len * hidden) on the input "
       "embeddings in training (5 in the paper); 0: none",
       &A::neftune_noise_alpha},
      {"lr_scheduler_type", optimizer,
       "linear, cosine, cosine_with_restarts, polynomial, constant, "
       "constant_with_warmup or inverse_sqrt",
       &A::lr_scheduler_type},
      {"warmup_ratio", optimizer, "share of the steps spent warming up (when warmup_steps is 0)",
       &A::warmup_ratio},
      {"warmup_steps", optimizer, "warm-up steps; > 0 overrides warmup_ratio", &A::warmup_steps},
      {"bf16", precision, "bf16 autocast with fp32 master weights", &A::bf16},
      {"fp16", precision, "fp16 autocast with fp32 master weights and dynamic loss scaling",
       &A::fp16},
      {"precision", precision,
       "fp32, bf16, fp16, pure_bf16 (bf16 weights, gradients and optimizer states; "
       "stochastically rounded updates) or pure_bf16+kahan (Kahan-compensated AdamW updates); "
       "overrides bf16 and fp16",
       &A::precision},
      {"memory_limit", precision,
       "cap the device's memory, e.g. 24GiB, to see whether a run fits a smaller GPU (default: "
       "HEADROOM_MEMORY_LIMIT)",
       &A::memory_limit},
      {"expandable_segments", precision,
       "grow one memory segment per stream and pool in pages instead of caching a segment per "
       "request size, which removes most of the allocator's slack (as "
       "HEADROOM_ALLOC_CONF=expandable_segments:True)",
       &A::expandable_segments},
      {"zero_stage", precision,
       "under mpirun: 0 (DDP, default), 1 (ZeRO-1: optimizer states sharded over the ranks), 2 "
       "(ZeRO-2: gradients reduced to their owner rank too) or 3 (ZeRO-3: the blocks' "
       "parameters sharded too, gathered for each use)",
       &A::zero_stage},
      {"deepspeed", precision,
       "a DeepSpeed JSON config: its zero_optimization.stage is the ZeRO stage, its "
       "offload_optimizer / offload_param (device cpu) turn offload on; other keys are named in a "
       "warning",
       &A::deepspeed},
      {"offload_optimizer", precision,
       "keep the optimizer's states and a copy of the parameters in host memory and run its step "
       "there (ZeRO-Offload); gradients leave the device as backward produces them",
       &A::offload_optimizer},
      {"offload_optimizer_ratio", precision,
       "the fraction of the parameters (by elements, in order) whose optimizer is offloaded",
       &A::offload_optimizer_ratio},
      {"offload_activations", precision,
       "move saved activations of the blocks (with gradient_checkpointing: the checkpoint inputs) "
       "to host memory, bringing them back one block ahead of backward",
       &A::offload_activations},
      {"offload_params", precision,
       "keep the blocks' weights in host memory, copying each block in for its forward and "
       "backward (the next one prefetched)",
       &A::offload_params},
      {"offload_pin_memory", precision, "page-locked host memory for offload on a GPU",
       &A::offload_pin_memory},
      {"ddp_bucket_cap_mb", precision,
       "under mpirun: the gradient buckets' size in MiB (the first 1 MiB, or this when smaller)",
       &A::ddp_bucket_cap_mb},
      {"average_tokens_across_devices", precision,
       "under mpirun, with rows or packing: weigh every rank's micro-batches by their share of "
       "the targets scored on all ranks, as one process would",
       &A::average_tokens_across_devices},
      {"fp8", precision,
       "the projection layers (not lm_head) compute in FP8 with Transformer Engine's recipes: "
       "E4M3 forward, E5M2 gradients (hybrid)",
       &A::fp8},
      {"fp8_recipe", precision,
       "delayed (per-tensor scales from an amax history), current (per-tensor, from each "
       "tensor), mxfp8 (1x32 blocks, E8M0 scales) or block (1x128, 128x128 weights)",
       &A::fp8_recipe},
      {"fp8_format", precision, "hybrid (E4M3 forward, E5M2 gradients) or e4m3", &A::fp8_format},
      {"fp8_amax_history_len", precision, "delayed scaling's amax history length",
       &A::fp8_amax_history_len},
      {"fp8_amax_compute_algo", precision,
       "delayed scaling's amax from its history: max or most_recent", &A::fp8_amax_compute_algo},
      {"fp8_margin", precision, "delayed scaling's scale is fp8_max / amax / 2^margin",
       &A::fp8_margin},
      {"fp8_save_original_input", precision,
       "save each FP8 layer's input in high precision for backward instead of its FP8 copy",
       &A::fp8_save_original_input},
      {"gradient_checkpointing", precision,
       "recompute activations in backward instead of keeping them", &A::gradient_checkpointing},
      {"gradient_checkpointing_policy", precision, "full, every_N (every N-th block) or selective",
       &A::gradient_checkpointing_policy},
      {"tiled_mlp", precision,
       "run each MLP over tiles of the tokens in forward and backward, so its tokens x "
       "intermediate tensors exist one tile at a time (Arctic's TiledMLP)",
       &A::tiled_mlp},
      {"tiled_mlp_tokens", precision,
       "tokens per tile of tiled_mlp; 0: ceil(tokens / hidden_size) tiles", &A::tiled_mlp_tokens},
      {"use_peft", peft,
       "train LoRA adapters on a frozen base; output_dir and checkpoints hold PEFT's "
       "adapter_model.safetensors and adapter_config.json",
       &A::use_peft},
      {"lora_r", peft, "the adapters' rank", &A::lora_r},
      {"lora_alpha", peft, "scaling numerator: updates are scaled by lora_alpha / lora_r",
       &A::lora_alpha},
      {"lora_dropout", peft, "dropout on the adapters' input", &A::lora_dropout},
      {"lora_target_modules", peft,
       "comma-separated layer names or suffixes (q_proj,v_proj), or all-linear (default: "
       "c_attn for GPT-2, q_proj,v_proj for Llama, Qwen and Mistral; none for Phi-3)",
       &A::lora_target_modules},
      {"lora_modules_to_save", peft,
       "comma-separated modules trained in full and saved with the adapter (e.g. lm_head)",
       &A::lora_modules_to_save},
      {"use_rslora", peft, "rank-stabilised scaling lora_alpha / sqrt(lora_r)", &A::use_rslora},
      {"load_in_4bit", peft,
       "QLoRA: every linear layer but lm_head a frozen 4-bit layer under the adapters",
       &A::load_in_4bit},
      {"bnb_4bit_quant_type", peft, "fp4 or nf4", &A::bnb_4bit_quant_type},
      {"bnb_4bit_use_double_quant", peft, "quantize the 4-bit blocks' absmax too",
       &A::bnb_4bit_use_double_quant, "use_bnb_nested_quant"},
      {"bnb_4bit_compute_dtype", peft,
       "float32, bfloat16 or float16 (default: the precision recipe's compute dtype)",
       &A::bnb_4bit_compute_dtype},
      {"bnb_4bit_quant_storage", peft, "uint8, bfloat16, float16 or float32",
       &A::bnb_4bit_quant_storage},
      {"logging_steps", logging, "log the loss and learning rate every N steps", &A::logging_steps},
      {"logging_first_step", logging, "log the first step too", &A::logging_first_step},
      {"eval_strategy", logging, "no or steps", &A::eval_strategy},
      {"eval_steps", logging,
       "evaluate every N steps with eval_strategy steps (default: logging_steps)", &A::eval_steps},
      {"eval_loss_target", logging,
       "end the run after the first evaluation whose loss is at or below this (0: none)",
       &A::eval_loss_target},
      {"save_strategy", logging, "no or steps", &A::save_strategy},
      {"save_steps", logging, "save a checkpoint every N steps", &A::save_steps},
      {"save_total_limit", logging, "keep at most N checkpoints (default: all)",
       &A::save_total_limit},
      {"resume_from_checkpoint", logging,
       "a checkpoint directory, or last (the newest in output_dir)", &A::resume_from_checkpoint},
      {"disable_tqdm", logging, "plain log lines even on a terminal", &A::disable_tqdm},
      {"report_to", logging,
       "where the logs go besides metrics.jsonl: tensorboard (event files in logging_dir), all "
       "(every integration: tensorboard) or none",
       &A::report_to},
      {"logging_dir", logging,
       "TensorBoard's log directory (default: output_dir/runs/<date>_<hostname>)", &A::logging_dir},
      {"dataloader_num_workers", loading, "worker threads loading batches; 0: the main thread",
       &A::dataloader_num_workers},
      {"dataloader_prefetch_factor", loading,
       "batches each worker loads ahead (default: 2 with workers)", &A::dataloader_prefetch_factor},
      {"dataloader_persistent_workers", loading, "keep the workers between epochs",
       &A::dataloader_persistent_workers},
      {"dataloader_pin_memory", loading, "page-locked batch buffers for faster copies to a GPU",
       &A::dataloader_pin_memory},
      {"dataloader_drop_last", loading, "drop the last incomplete batch", &A::dataloader_drop_last},
      {"seed", other, "seed of initialisation, dropout and shuffling", &A::seed},
      {"data_seed", other, "seed of the data shuffling (default: seed)", &A::data_seed},
      {"sample_prompt", other, "prompt of the sample printed after training", &A::sample_prompt},
      {"sample_max_new_tokens", other, "tokens generated for the sample; 0: no sample",
       &A::sample_max_new_tokens},
      {"profile", profiling,
       "profile the ops of a few steps: output_dir/trace.json (Chrome trace) and a summary table",
       &A::profile},
      {"profile_skip_first", profiling, "steps before the profiler's schedule starts",
       &A::profile_skip_first},
      {"profile_wait", profiling, "idle steps at the start of each profiling cycle",
       &A::profile_wait},
      {"profile_warmup", profiling, "warm-up steps (not recorded) after the idle ones",
       &A::profile_warmup},
      {"profile_active", profiling, "recorded steps at the end of each cycle", &A::profile_active},
      {"profile_repeat", profiling, "profiling cycles; 0: until the run ends", &A::profile_repeat},
      {"memory_snapshot", profiling,
       "record the allocator's history and write PyTorch's memory snapshot (a pickle for "
       "pytorch.org/memory_viz) here at the end of the run or at out-of-memory",
       &A::memory_snapshot},
  };
}

// Visitor overloads for TrainingField.
template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
// C++20 deduces this by itself, but clang before 17 needs the guide.
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

const std::vector<TrainOption>& train_options() {
  static const std::vector<TrainOption> options = make_train_options();
  return options;
}

bool read_by_plan(const TrainOption& option) {
  // data is read for rows (Note [Planning rows]): their batches' shapes come from the file.
  static const std::set<std::string_view> not_read = {"output_dir",
                                                      "overwrite_output_dir",
                                                      "validation_split_percentage",
                                                      "max_eval_samples",
                                                      "max_steps",
                                                      "num_train_epochs",
                                                      "learning_rate",
                                                      "weight_decay",
                                                      "adam_beta1",
                                                      "adam_beta2",
                                                      "adam_epsilon",
                                                      "lr_scheduler_type",
                                                      "warmup_ratio",
                                                      "warmup_steps",
                                                      "memory_limit",
                                                      "lora_alpha",
                                                      "use_rslora",
                                                      "logging_steps",
                                                      "logging_first_step",
                                                      "eval_steps",
                                                      "save_strategy",
                                                      "save_steps",
                                                      "save_total_limit",
                                                      "resume_from_checkpoint",
                                                      "disable_tqdm",
                                                      "report_to",
                                                      "logging_dir",
                                                      "dataloader_persistent_workers",
                                                      "average_tokens_across_devices",
                                                      "auto_find_batch_size",
                                                      "dataloader_pin_memory",
                                                      "dataloader_drop_last",
                                                      "seed",
                                                      "data_seed",
                                                      "sample_prompt",
                                                      "sample_max_new_tokens",
                                                      "profile",
                                                      "profile_skip_first",
                                                      "profile_wait",
                                                      "profile_warmup",
                                                      "profile_active",
                                                      "profile_repeat"};
  return !not_read.contains(option.name);
}

nlohmann::ordered_json training_arguments_json(const TrainingArguments& args) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const TrainOption& option : train_options()) {
    json[option.name] = std::visit(
        Overloaded{
            [&](std::string A::*f) { return nlohmann::ordered_json(args.*f); },
            [&](int64_t A::*f) { return nlohmann::ordered_json(args.*f); },
            [&](std::optional<int64_t> A::*f) {
              return (args.*f) ? nlohmann::ordered_json(*(args.*f)) : nlohmann::ordered_json();
            },
            [&](std::optional<bool> A::*f) {
              return (args.*f) ? nlohmann::ordered_json(*(args.*f)) : nlohmann::ordered_json();
            },
            [&](double A::*f) { return nlohmann::ordered_json(args.*f); },
            [&](bool A::*f) { return nlohmann::ordered_json(args.*f); },
        },
        option.field);
  }
  return json;
}

std::string kebab_case(std::string_view snake_name) {
  std::string name(snake_name);
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

const TrainOption* find_train_option(std::string_view name) {
  std::string snake(name);
  std::replace(snake.begin(), snake.end(), '-', '_');
  for (const TrainOption& option : train_options()) {
    if (snake == option.name || (option.alias && snake == option.alias)) return &option;
  }
  return nullptr;
}

const char* option_type_name(const TrainOption& option) {
  return std::visit(Overloaded{
                        [](std::string A::*) { return "TEXT"; },
                        [](int64_t A::*) { return "INT"; },
                        [](std::optional<int64_t> A::*) { return "INT"; },
                        [](std::optional<bool> A::*) { return "BOOL"; },
                        [](double A::*) { return "FLOAT"; },
                        [](bool A::*) { return "BOOL"; },
                    },
                    option.field);
}

std::string option_value_text(const TrainingArguments& args, const TrainOption& option) {
  return std::visit(Overloaded{
                        [&](std::string A::*f) { return args.*f; },
                        [&](int64_t A::*f) { return std::to_string(args.*f); },
                        [&](std::optional<int64_t> A::*f) {
                          return (args.*f) ? std::to_string(*(args.*f)) : std::string();
                        },
                        [&](std::optional<bool> A::*f) {
                          return (args.*f) ? std::string(*(args.*f) ? "true" : "false")
                                           : std::string();
                        },
                        [&](double A::*f) { return format_real(args.*f); },
                        [&](bool A::*f) { return std::string((args.*f) ? "true" : "false"); },
                    },
                    option.field);
}

std::string train_command_line(const TrainingArguments& args) {
  const TrainingArguments defaults;
  std::string line = "headroom train";
  for (const TrainOption& option : train_options()) {
    const std::string value = option_value_text(args, option);
    if (std::string_view(option.name) == "device" || value == option_value_text(defaults, option)) {
      continue;
    }
    line += str_cat(" --", option.name);
    if (std::holds_alternative<bool A::*>(option.field) && value == "true") continue;
    const bool quote = value.empty() || value.find_first_of(" '\"\\$") != std::string::npos;
    if (!quote) {
      line += str_cat(" ", value);
      continue;
    }
    std::string quoted = "'";
    for (char c : value) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += str_cat(" ", quoted, "'");
  }
  return line;
}

void set_option_from_text(TrainingArguments& args, const TrainOption& option, std::string_view text,
                          const std::string& origin) {
  std::visit(Overloaded{
                 [&](std::string A::*f) { args.*f = std::string(text); },
                 [&](int64_t A::*f) { args.*f = parse_integer_value(text, origin); },
                 [&](std::optional<int64_t> A::*f) { args.*f = parse_integer_value(text, origin); },
                 [&](std::optional<bool> A::*f) {
                   args.*f = text.empty() || parse_bool_value(text, origin);
                 },
                 [&](double A::*f) { args.*f = parse_real_value(text, origin); },
                 [&](bool A::*f) { args.*f = text.empty() || parse_bool_value(text, origin); },
             },
             option.field);
}

void set_option_from_config(TrainingArguments& args, const TrainOption& option,
                            const ConfigValue& value, const std::string& origin) {
  using Kind = ConfigValue::Kind;
  auto wrong = [&](const char* expected) {
    return ValueError(str_cat(origin, ": expected ", expected, ", got ", value.describe()));
  };
  std::visit(Overloaded{
                 [&](std::string A::*f) {
                   if (value.kind != Kind::string) throw wrong("a string");
                   args.*f = value.text;
                 },
                 [&](int64_t A::*f) {
                   if (value.kind != Kind::integer) throw wrong("an integer");
                   args.*f = value.integer;
                 },
                 [&](std::optional<int64_t> A::*f) {
                   if (value.kind == Kind::null) {
                     args.*f = std::nullopt;
                   } else if (value.kind == Kind::integer) {
                     args.*f = value.integer;
                   } else {
                     throw wrong("an integer or null");
                   }
                 },
                 [&](std::optional<bool> A::*f) {
                   if (value.kind == Kind::null) {
                     args.*f = std::nullopt;
                   } else if (value.kind == Kind::boolean) {
                     args.*f = value.boolean;
                   } else {
                     throw wrong("true, false or null");
                   }
                 },
                 [&](double A::*f) {
                   if (value.kind == Kind::integer) {
                     args.*f = static_cast<double>(value.integer);
                   } else if (value.kind == Kind::real && std::isfinite(value.real)) {
                     args.*f = value.real;
                   } else {
                     throw wrong("a finite number");
                   }
                 },
                 [&](bool A::*f) {
                   if (value.kind != Kind::boolean) throw wrong("true or false");
                   args.*f = value.boolean;
                 },
             },
             option.field);
}

void apply_config_file(TrainingArguments& args, const std::string& path, OptionOrigins& origins) {
  std::map<std::string, std::string> seen;  // snake name -> the key as written
  for (const ConfigEntry& entry : read_config_file(path)) {
    const TrainOption* option = find_train_option(entry.key);
    if (!option) {
      throw ValueError(
          str_cat(path, ": unknown key '", shortened(entry.key), "' (see headroom train --help)"));
    }
    if (auto [it, inserted] = seen.emplace(option->name, entry.key); !inserted) {
      throw ValueError(str_cat(path, ": ", option->name, " is given twice (as '", it->second,
                               "' and as '", entry.key, "')"));
    }
    const std::string origin = str_cat(path, ": ", entry.key);
    set_option_from_config(args, *option, entry.value, origin);
    origins[option->name] = origin;
  }
}

void validate_training_arguments(const TrainingArguments& a, const OptionOrigins& origins,
                                 DataCheck data) {
  auto where = [&](const char* name) {
    auto it = origins.find(name);
    return it == origins.end() ? std::string(name) : it->second;
  };
  auto check = [&](bool ok, const char* name, const auto&... message) {
    if (!ok) throw ValueError(str_cat(where(name), ": ", message...));
  };
  auto one_of = [&](const std::string& value, const char* name, std::vector<std::string> choices) {
    const bool ok = std::find(choices.begin(), choices.end(), value) != choices.end();
    check(ok, name, "unknown value '", value, "' (expected one of ", joined(choices), ")");
  };
  auto rethrow_named = [&](const char* name, auto&& parse) {
    try {
      parse();
    } catch (const Error& e) {  // ValueError, or NotImplementedError for HF names not offered
      throw ValueError(str_cat(where(name), ": ", e.what()));
    }
  };

  // Model and data.
  check(!a.model.empty(), "model", "must not be empty");
  std::error_code ec;
  if (data == DataCheck::required) {
    if (a.data.empty()) {
      throw ValueError(
          "--data is required: a text file, a directory of text files, or JSONL / JSON rows");
    }
    check(std::filesystem::exists(a.data, ec), "data", "'", a.data, "' does not exist");
    check(a.eval_data.empty() || std::filesystem::exists(a.eval_data, ec), "eval_data", "'",
          a.eval_data, "' does not exist");
  }
  check(a.chat_template_path.empty() || std::filesystem::exists(a.chat_template_path, ec),
        "chat_template_path", "'", a.chat_template_path, "' does not exist");
  check(!a.output_dir.empty(), "output_dir", "must not be empty");
  if (a.device != "auto") rethrow_named("device", [&] { Device::parse(a.device); });
  if (!a.memory_limit.empty()) {
    check(parse_byte_size(a.memory_limit, where("memory_limit").c_str()) > 0, "memory_limit", "'",
          a.memory_limit, "' is no memory at all (leave the option out for no cap)");
  }
  check(!a.max_seq_length || *a.max_seq_length > 0, "max_seq_length", a.max_seq_length.value_or(0),
        " is not positive");
  check(a.validation_split_percentage >= 0 && a.validation_split_percentage < 100,
        "validation_split_percentage", format_real(a.validation_split_percentage),
        " is outside [0, 100)");

  // Batches and length.
  check(a.per_device_train_batch_size > 0, "per_device_train_batch_size",
        a.per_device_train_batch_size, " is not positive");
  check(a.per_device_eval_batch_size > 0, "per_device_eval_batch_size",
        a.per_device_eval_batch_size, " is not positive");
  check(a.gradient_accumulation_steps > 0, "gradient_accumulation_steps",
        a.gradient_accumulation_steps, " is not positive");
  check(a.max_steps == -1 || a.max_steps > 0, "max_steps", a.max_steps,
        " must be positive, or -1 to train for num_train_epochs");
  check(a.max_steps > 0 || a.num_train_epochs > 0, "num_train_epochs",
        format_real(a.num_train_epochs), " is not positive (and max_steps is -1)");

  // Optimizer and schedule.
  one_of(a.optim, "optim", optimizer_names());
  rethrow_named("optim_args", [&] { parse_optim_args(a.optim_args); });
  check(a.learning_rate >= 0, "learning_rate", format_real(a.learning_rate), " is negative");
  check(a.weight_decay >= 0, "weight_decay", format_real(a.weight_decay), " is negative");
  check(a.adam_beta1 >= 0 && a.adam_beta1 < 1, "adam_beta1", format_real(a.adam_beta1),
        " is outside [0, 1)");
  check(a.adam_beta2 >= 0 && a.adam_beta2 < 1, "adam_beta2", format_real(a.adam_beta2),
        " is outside [0, 1)");
  check(a.adam_epsilon >= 0, "adam_epsilon", format_real(a.adam_epsilon), " is negative");
  check(a.max_grad_norm >= 0, "max_grad_norm", format_real(a.max_grad_norm),
        " is negative (0 turns clipping off)");
  check(a.neftune_noise_alpha >= 0, "neftune_noise_alpha", format_real(a.neftune_noise_alpha),
        " is negative (0 adds no noise)");
  // The noise's bound is alpha / sqrt(T * d): beyond fp32's range it is infinite, and every
  // weight the first step touches becomes NaN.
  check(a.neftune_noise_alpha <= std::numeric_limits<float>::max(), "neftune_noise_alpha",
        format_real(a.neftune_noise_alpha),
        " is beyond fp32's range (3.4e38): the noise would be "
        "infinite");
  rethrow_named("lr_scheduler_type", [&] { parse_scheduler_type(a.lr_scheduler_type); });
  check(a.warmup_ratio >= 0 && a.warmup_ratio <= 1, "warmup_ratio", format_real(a.warmup_ratio),
        " is outside [0, 1]");
  check(a.warmup_steps >= 0, "warmup_steps", a.warmup_steps, " is negative");

  // Precision and memory.
  if (a.bf16 && a.fp16) {
    throw ValueError(str_cat(where("bf16"), " and ", where("fp16"),
                             " are both true: choose one (or set precision)"));
  }
  if (!a.precision.empty()) rethrow_named("precision", [&] { parse_precision(a.precision); });
  // LoRA: the fields LoraConfig::validate checks, named as the user wrote them.
  if (a.use_peft) {
    check(a.lora_r > 0, "lora_r", a.lora_r, " must be > 0");
    check(std::isfinite(a.lora_alpha), "lora_alpha", format_real(a.lora_alpha),
          " is not a finite number");
    check(a.lora_dropout >= 0 && a.lora_dropout < 1, "lora_dropout", format_real(a.lora_dropout),
          " is outside [0, 1)");
  }

  // Logging, evaluation, checkpoints. HF's eval_strategy "steps" without eval_steps evaluates
  // every logging_steps (TrainingArguments.__post_init__); eval_steps with eval_strategy "no"
  // is ignored, as in HF.
  check(a.logging_steps > 0, "logging_steps", a.logging_steps, " is not positive");
  check(!a.eval_steps || *a.eval_steps > 0, "eval_steps", a.eval_steps.value_or(0),
        " is not positive");
  check(!a.max_eval_samples || *a.max_eval_samples > 0, "max_eval_samples",
        a.max_eval_samples.value_or(0), " is not positive");
  // eval_strategy and save_strategy: resolve_training_config, below.
  check(a.save_steps > 0 || a.save_strategy == "no", "save_steps", a.save_steps,
        " is not positive");
  check(!a.save_total_limit || *a.save_total_limit > 0, "save_total_limit",
        a.save_total_limit.value_or(0), " is not positive");
  rethrow_named("report_to", [&] { parse_report_to(a.report_to); });
  if (!a.resume_from_checkpoint.empty() && a.resume_from_checkpoint != "last") {
    check(std::filesystem::is_directory(a.resume_from_checkpoint, ec), "resume_from_checkpoint",
          "'", a.resume_from_checkpoint, "' is not a directory");
  }

  // Data loading: torch.utils.data.DataLoader's rules.
  check(a.dataloader_num_workers >= 0, "dataloader_num_workers", a.dataloader_num_workers,
        " is negative");
  if (a.dataloader_prefetch_factor) {
    check(*a.dataloader_prefetch_factor > 0, "dataloader_prefetch_factor",
          *a.dataloader_prefetch_factor, " is not positive");
    check(a.dataloader_num_workers > 0, "dataloader_prefetch_factor",
          "needs dataloader_num_workers > 0 (batches are loaded in the main thread)");
  }
  check(!a.dataloader_persistent_workers || a.dataloader_num_workers > 0,
        "dataloader_persistent_workers", "needs dataloader_num_workers > 0");

  // Seeds and the sample.
  check(a.seed >= 0, "seed", a.seed, " is negative");
  check(!a.data_seed || *a.data_seed >= 0, "data_seed", a.data_seed.value_or(0), " is negative");
  check(a.sample_max_new_tokens >= 0, "sample_max_new_tokens", a.sample_max_new_tokens,
        " is negative");

  // Profiling: torch.profiler.schedule's assertions.
  check(a.profile_skip_first >= 0, "profile_skip_first", a.profile_skip_first, " is negative");
  check(a.profile_wait >= 0, "profile_wait", a.profile_wait, " is negative");
  check(a.profile_warmup >= 0, "profile_warmup", a.profile_warmup, " is negative");
  check(a.profile_active > 0, "profile_active", a.profile_active, " is not positive");
  check(a.profile_repeat >= 0, "profile_repeat", a.profile_repeat,
        " is negative (0 repeats until the run ends)");

  // An explicit `--offload_optimizer false` (or offload_params) against a DeepSpeed file that
  // offloads: the file used to win silently. Refused as transformers refuses a DeepSpeed value
  // that mismatches TrainingArguments; left at its default, the option lets the file decide.
  if (!a.deepspeed.empty()) {
    const DeepSpeedConfig ds = read_deepspeed_config(a.deepspeed);
    const std::tuple<const char*, bool, std::optional<bool>, const char*> pairs[] = {
        {"offload_optimizer", a.offload_optimizer, ds.offload_optimizer, "offload_optimizer"},
        {"offload_params", a.offload_params, ds.offload_param, "offload_param"}};
    for (const auto& [name, value, file_value, section] : pairs) {
      check(!origins.count(name) || value || !file_value.value_or(false), name, "false, and ",
            a.deepspeed, "'s zero_optimization.", section,
            " offloads to the CPU; leave one of them out, or make them agree");
    }
  }

  // The rest is typed once, by the resolver the run uses (precision, checkpointing policy,
  // optimizer, LoRA's modules, FP8, 4-bit, ZeRO, offload, strategies): its errors start with the
  // option's name, named here as the user wrote it.
  try {
    resolve_training_config(a);
  } catch (const Error& e) {
    std::string message = e.what();
    for (const auto& [name, origin] : origins) {
      if (message.starts_with(name + ":")) {
        message = origin + message.substr(name.size());
        break;
      }
    }
    throw ValueError(message);
  }
}

}  // namespace headroom

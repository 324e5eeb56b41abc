// The Trainer: HF Trainer's loop for causal LMs on headroom's precision recipes, with
// checkpoints that resume bit-identically and an exact memory report.
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
#include "train/model_source.h"
#include "train/progress.h"
#include "train/stop_signals.h"
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

std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the stop flag is set from signal handlers");

using Clock = std::chrono::steady_clock;

// The positions in `params` of the tensors among `sources` (by autograd identity), in the
// sources' order; tensors that are not parameters (ZeRO-3's gathered copies) are left out.
std::vector<size_t> positions_of(const std::vector<Tensor>& sources,
                                 const std::vector<Tensor>& params) {
  std::unordered_map<const AutogradMeta*, size_t> position;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].autograd_meta()) position.emplace(params[i].autograd_meta(), i);
  }
  std::vector<size_t> out;
  for (const Tensor& source : sources) {
    if (auto it = position.find(source.autograd_meta()); it != position.end()) {
      out.push_back(it->second);
    }
  }
  return out;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void check_arguments(const TrainingArguments& args) {
  auto at_least = [](const char* name, int64_t value, int64_t limit) {
    if (value < limit) throw ValueError(str_cat(name, ": ", value, " is below ", limit));
  };
  at_least("per_device_train_batch_size", args.per_device_train_batch_size, 1);
  at_least("per_device_eval_batch_size", args.per_device_eval_batch_size, 1);
  if (!(args.ddp_bucket_cap_mb * (1 << 20) >= 1.0)) {
    throw ValueError(str_cat("ddp_bucket_cap_mb: ", args.ddp_bucket_cap_mb,
                             " is below one byte"));
  }
  at_least("gradient_accumulation_steps", args.gradient_accumulation_steps, 1);
  at_least("logging_steps", args.logging_steps, 1);
  if (args.max_steps <= 0 && !(args.num_train_epochs > 0.0)) {
    throw ValueError(str_cat("num_train_epochs: ", args.num_train_epochs,
                             " must be > 0 when max_steps (", args.max_steps, ") is not set"));
  }
  if (args.eval_strategy != "no" && args.eval_strategy != "steps") {
    throw ValueError(str_cat("eval_strategy: '", args.eval_strategy, "' (one of no, steps)"));
  }
  if (args.save_strategy != "no" && args.save_strategy != "steps") {
    throw ValueError(str_cat("save_strategy: '", args.save_strategy, "' (one of no, steps)"));
  }
  if (args.save_strategy == "steps") at_least("save_steps", args.save_steps, 1);
  if (args.eval_steps) at_least("eval_steps", *args.eval_steps, 1);
  if (args.max_eval_samples) at_least("max_eval_samples", *args.max_eval_samples, 1);
  if (args.max_grad_norm < 0.0) {
    throw ValueError(str_cat("max_grad_norm: ", args.max_grad_norm, " is below 0"));
  }
  if (!(args.neftune_noise_alpha >= 0.0)) {
    throw ValueError(str_cat("neftune_noise_alpha: ", args.neftune_noise_alpha, " is below 0"));
  }
  if (args.data.empty()) throw ValueError("data: no training data given");
}

// A scalar's value for the log; NaN on the meta device, which has no values (a dry run).
double host_value(const Tensor& scalar) {
  count_skipped_host_read(scalar);
  return scalar.device().is_meta() ? NAN : scalar.item();
}

// Mean cross-entropy over every target of `count` batches, weighted by their token counts.
EvalResult evaluate_batches(CausalLM& model, int64_t count,
                            const std::function<TokenBatch(int64_t)>& batch_at, Device device,
                            std::optional<DType> autocast_dtype) {
  EvalResult result;
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  double total = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const TokenBatch batch = batch_at(i);
    Autocast region(device.type, autocast_dtype, autocast_dtype.has_value());
    const double loss =
        host_value(model.loss(batch.input_ids, batch.targets, batch.target_count));
    const int64_t tokens = batch.targets.numel();
    total += loss * static_cast<double>(tokens);
    result.tokens += tokens;
  }
  model.train(was_training);
  result.loss = result.tokens > 0 ? total / static_cast<double>(result.tokens) : NAN;
  result.perplexity = std::exp(result.loss);
  return result;
}

std::string dump_json(const nlohmann::ordered_json& value) { return value.dump(2) + "\n"; }

// Appends `line` to the file at `path`. A failed write (a full disk) is an Error naming the path,
// and the file is cut back to its old end so that it holds no torn line.
void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    throw Error(str_cat(path, ": cannot open it to append a log line: ",
                        std::generic_category().message(errno)));
  }
  const off_t end = ::lseek(fd, 0, SEEK_END);
  size_t written = 0;
  int error = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(fd, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : ENOSPC;
      break;
    }
    written += static_cast<size_t>(n);
  }
  if (error != 0 && written > 0 && end >= 0) (void)::ftruncate(fd, end);
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    throw Error(str_cat(path, ": writing a log line failed: ",
                        std::generic_category().message(error),
                        " (the run stops: its metrics would be lost)"));
  }
}

// A phase of the training step, named in the profiler's trace (a user scope) and in the frames
// of the memory snapshot's allocations. Costs a label push when neither is recording.
class StepPhase {
 public:
  explicit StepPhase(const char* name) : record_(RecordScope::user_scope, name), context_(name) {}

 private:
  RecordFunction record_;
  MemoryContext context_;
};

}  // namespace

int64_t training_zero_stage(const TrainingArguments& args) {
  std::optional<int64_t> stage = args.zero_stage;
  if (!args.deepspeed.empty()) {
    // No zero_optimization section (or no stage in it): stage 0, as DeepSpeed.
    const int64_t from_file = read_deepspeed_config(args.deepspeed).zero_stage.value_or(0);
    if (stage && *stage != from_file) {
      throw ValueError(str_cat("zero_stage: ", *stage, " differs from ", args.deepspeed,
                               "'s zero_optimization.stage ", from_file));
    }
    stage = from_file;
  }
  const int64_t value = stage.value_or(0);
  if (value < 0 || value > 3) throw ValueError(str_cat("zero_stage: ", value, " is not 0..3"));
  return value;
}

OffloadSettings training_offload(const TrainingArguments& args) {
  OffloadSettings out;
  out.optimizer = args.offload_optimizer;
  out.optimizer_ratio = args.offload_optimizer_ratio;
  out.activations = args.offload_activations;
  out.params = args.offload_params;
  out.pin_memory = args.offload_pin_memory;
  if (!args.deepspeed.empty()) {
    const DeepSpeedConfig config = read_deepspeed_config(args.deepspeed);
    out.optimizer = out.optimizer || config.offload_optimizer.value_or(false);
    out.params = out.params || config.offload_param.value_or(false);
    if (config.offload_optimizer_ratio) {
      if (args.offload_optimizer_ratio != 1.0 &&
          args.offload_optimizer_ratio != *config.offload_optimizer_ratio) {
        throw ValueError(str_cat("offload_optimizer_ratio: ", args.offload_optimizer_ratio,
                                 " differs from ", args.deepspeed,
                                 "'s zero_optimization.offload_optimizer.ratio ",
                                 *config.offload_optimizer_ratio));
      }
      out.optimizer_ratio = *config.offload_optimizer_ratio;
    }
    // One host pool: pinned unless a section that offloads says pin_memory false.
    if ((config.offload_optimizer.value_or(false) && !config.offload_optimizer_pin_memory.value_or(true)) ||
        (config.offload_param.value_or(false) && !config.offload_param_pin_memory.value_or(true))) {
      out.pin_memory = false;
    }
  }
  if (!(out.optimizer_ratio >= 0.0 && out.optimizer_ratio <= 1.0)) {
    throw ValueError(str_cat("offload_optimizer_ratio: ", out.optimizer_ratio,
                             " is not in [0, 1]"));
  }
  return out;
}

PrecisionRecipe training_precision(const TrainingArguments& args) {
  if (!args.precision.empty()) return parse_precision(args.precision);
  if (args.bf16 && args.fp16) throw ValueError("bf16 and fp16: both are set; choose one");
  if (args.bf16) return precision_recipe(Precision::bf16);
  if (args.fp16) return precision_recipe(Precision::fp16);
  return precision_recipe(Precision::fp32);
}

LoraConfig training_lora_config(const TrainingArguments& args) {
  LoraConfig config;
  config.r = args.lora_r;
  config.lora_alpha = args.lora_alpha;
  config.lora_dropout = args.lora_dropout;
  config.use_rslora = args.use_rslora;
  config.target_modules = split_module_names(args.lora_target_modules);
  config.modules_to_save = split_module_names(args.lora_modules_to_save);
  config.base_model_name_or_path = args.model;
  return config;
}

namespace {

// dtype_from_name with the option's name in front of its error.
DType named_dtype(const std::string& name, const char* field) {
  try {
    return dtype_from_name(name);
  } catch (const ValueError& e) {
    throw ValueError(str_cat(field, ": ", e.what()));
  }
}

}  // namespace

std::optional<Quant4bitConfig> training_quant_4bit_config(const TrainingArguments& args,
                                                          const PrecisionRecipe& recipe) {
  if (!args.load_in_4bit) return std::nullopt;
  if (!args.use_peft) {
    throw ValueError("load_in_4bit: true without use_peft; a 4-bit base is frozen and trains "
                     "only through LoRA adapters");
  }
  Quant4bitConfig config;
  config.quant_type = parse_quant_4bit_type(args.bnb_4bit_quant_type, "bnb_4bit_quant_type");
  config.double_quant = args.bnb_4bit_use_double_quant;
  // Unset: the recipe's compute dtype, as TRL passes its model dtype to BitsAndBytesConfig.
  config.compute_dtype = args.bnb_4bit_compute_dtype.empty()
                             ? recipe.autocast_dtype.value_or(recipe.param_dtype)
                             : named_dtype(args.bnb_4bit_compute_dtype, "bnb_4bit_compute_dtype");
  config.quant_storage = named_dtype(args.bnb_4bit_quant_storage, "bnb_4bit_quant_storage");
  check_quant_4bit_config(config, "load_in_4bit");
  return config;
}

std::optional<Fp8Recipe> training_fp8_recipe(const TrainingArguments& args) {
  if (!args.fp8) return std::nullopt;
  Fp8Recipe recipe;
  recipe.kind = parse_fp8_recipe_kind(args.fp8_recipe);
  recipe.format = parse_fp8_format(args.fp8_format);
  recipe.amax_history_len = args.fp8_amax_history_len;
  recipe.amax_compute_algo = parse_amax_compute_algo(args.fp8_amax_compute_algo);
  HEADROOM_CHECK_VALUE(args.fp8_margin >= 0 && args.fp8_margin <= 64, "fp8_margin: ",
                       args.fp8_margin, " is outside [0, 64]");
  recipe.margin = static_cast<int>(args.fp8_margin);
  recipe.validate();
  return recipe;
}

void request_training_stop(int signal_number) { g_stop_signal.store(signal_number); }

int training_stop_requested() { return g_stop_signal.load(); }

Trainer::Trainer(TrainingArguments args, BatchSourceFactory make_data,
                 std::shared_ptr<Communicator> communicator)
    : args_(std::move(args)), make_data_(std::move(make_data)) {
  check_arguments(args_);
  if (!make_data_) make_data_ = make_data_loader_batch_source;
  device_ = resolve_device(args_.device);
  if (communicator && communicator->world_size() > 1) {
    if (communicator->device() != device_) {
      throw ValueError(str_cat("device: ", device_, ", but the data-parallel communicator (",
                               communicator->backend(), ") carries ", communicator->device(),
                               " tensors"));
    }
    communicator_ = std::move(communicator);
  }
  recipe_ = training_precision(args_);
  build();
}

Trainer::~Trainer() = default;

void Trainer::build() {
  reducer_.reset();  // its hooks are on the old model's parameters
  zero_parameters_.reset();
  scaler_.reset();
  fp8_.reset();
  scheduler_.reset();
  optimizer_.reset();
  data_.reset();
  model_.reset();
  manual_seed(static_cast<uint64_t>(args_.seed));
  // Each weight is made in the recipe's dtype (a 4-bit base layer quantized as it is made), so
  // no full-precision copy of the model exists (Note [Materializing one tensor at a time]).
  // A directory saved in 4 bits loads 4-bit whatever the options; its weights have no gradient,
  // so only adapters can train on it (transformers' Trainer refuses "purely quantized models"
  // too). Accepted, the run would train the rest and save checkpoints no resume could read.
  if (const fs::path config = fs::path(args_.model) / "config.json";
      !args_.use_peft && fs::is_regular_file(config) &&
      read_quantization_config(config.string())) {
    throw ValueError(str_cat(config.string(), ": quantization_config: the model is saved in 4 "
                             "bits, and full fine-tuning cannot update 4-bit weights; add "
                             "--use_peft to train LoRA adapters on it"));
  }
  LoadOptions load;
  load.dtype = recipe_.param_dtype;
  load.load_in_4bit = training_quant_4bit_config(args_, recipe_);
  // LoRA under autocast: the frozen projections are made in the compute dtype at once (Note [A
  // frozen base in the compute dtype]), never in the fp32 of the master weights.
  const bool frozen_in_compute = args_.use_peft && recipe_.autocast_dtype && !load.load_in_4bit;
  if (frozen_in_compute) {
    load.frozen_linear_dtype = *recipe_.autocast_dtype;
    load.keep_modules = split_module_names(args_.lora_modules_to_save);
  }
  const int64_t zero_stage = communicator_ ? training_zero_stage(args_) : 0;
  if (zero_stage >= 3 && !args_.use_peft && !load.load_in_4bit) {
    // ZeRO-3's sharded load: each rank makes the block parameters it will own and the rest of
    // the model, never the whole (Note [ZeRO-3 parameter sharding]). The owners are the
    // optimizer's partition of every parameter, which shard_parameters checks.
    const int rank = communicator_->rank(), world = communicator_->world_size();
    load.keep_parameter = [rank, world](const CausalLM& meta) {
      std::vector<std::string> names;
      std::vector<Tensor> tensors;
      for (const auto& [name, p] : meta.named_parameters()) {
        names.push_back(name);
        tensors.push_back(p);
      }
      const std::vector<int> owners = partition_parameters(tensors, world);
      std::unordered_set<std::string> others;
      for (size_t i = 0; i < names.size(); ++i) {
        if (owners[i] != rank && is_block_parameter(meta, names[i])) others.insert(names[i]);
      }
      return [others = std::move(others)](const std::string& name) {
        return others.count(name) == 0;
      };
    };
  }
  ModelAndTokenizer loaded =
      load_model_and_tokenizer(args_.model, device_, static_cast<uint64_t>(args_.seed), load);
  adapter_base_.reset();
  // Rank 0 alone reads the base's files for their checksums: it writes the record, and a resume
  // it refuses ends every rank (run_training).
  if (args_.use_peft && is_main_process()) {
    adapter_base_ = describe_adapter_base(args_.model, static_cast<uint64_t>(args_.seed), load);
  }
  model_ = std::move(loaded.model);
  tokenizer_ = std::move(loaded.tokenizer);
  const int64_t context = context_length(model_->config());
  const int64_t t = args_.max_seq_length.value_or(context);
  if (t < 1 || t > context) {
    throw ValueError(str_cat("max_seq_length: ", t, " is outside [1, ", context,
                             "] (the model's context length)"));
  }
  window_ = t + 1;
  // The adapters in the recipe's parameter dtype (fp32 under autocast, as PEFT's); the rest is
  // already in it, but for the frozen projections made in the compute dtype.
  lora_.reset();
  if (args_.use_peft) {
    lora_ = training_lora_config(args_);
    apply_lora(*model_, *lora_, nullptr, recipe_.param_dtype);
  }
  if (!frozen_in_compute) model_->to(recipe_.param_dtype);
  if (lora_ && recipe_.autocast_dtype) {
    // See Note [A frozen base in the compute dtype].
    store_frozen_projections(*model_, *recipe_.autocast_dtype);
  }
  // TE's te.Linear for the projections (not lm_head), after LoRA: the frozen base computes in
  // FP8, the adapters in the recipe's precision.
  if (const std::optional<Fp8Recipe> fp8 = training_fp8_recipe(args_)) {
    fp8_ = std::make_unique<Fp8Training>(*fp8, args_.fp8_save_original_input);
    enable_fp8_linears(*model_, *fp8_);
  }
  model_->train();
  // HF's activate_neftune: the noise is the input embedding's, in training mode only, so that
  // evaluate() (eval mode) scores the model without it.
  if (args_.neftune_noise_alpha > 0.0) {
    model_->input_embeddings().set_neftune_noise_alpha(args_.neftune_noise_alpha);
  }
  // HF's gradient_checkpointing_enable(), with the policy (memsave) the option names.
  if (args_.gradient_checkpointing) {
    enable_gradient_checkpointing(*model_,
                                  parse_checkpoint_policy(args_.gradient_checkpointing_policy));
  }
  offload_ = training_offload(args_);
  offloaded_optimizer_ = nullptr;
  if (communicator_ && offload_.params) {
    throw NotImplementedError(str_cat("offload_params with ", communicator_->world_size(),
                                      " data-parallel ranks is not supported yet; offload it on "
                                      "one rank (offload_optimizer and offload_activations work "
                                      "with data parallel; zero_stage 3 shards the parameters)"));
  }
  if (offload_.params) {
    // The weights on the host, and their optimizer with them (FSDP's CPU offload).
    enable_parameter_offload(*model_, device_, {.pin_memory = offload_.pin_memory});
    offload_.optimizer = true;
  }
  // Outside the checkpointing runner: with checkpointing, the checkpoint inputs go to the host.
  if (offload_.activations) {
    enable_activation_offload(*model_, device_, {.pin_memory = offload_.pin_memory});
  }
  data_ = make_data_(args_, *tokenizer_, window_, device_);
  if (communicator_) {
    data_ = std::make_unique<ShardedBatchSource>(std::move(data_), communicator_->rank(),
                                                 communicator_->world_size());
  }
  // Note [Targets counted by the caller]: the batches' ids were checked against the tokenizer's
  // vocabulary (which fits the model's, load_model_and_tokenizer) as the tokens were made.
  if (data_->ids_checked()) model_->input_embeddings().set_id_check(IdCheck::by_caller);

  // Optimizers: the single call site; make_optimizer knows every `optim` name. The pure bf16
  // recipe keeps AdamW's moments in bf16 (Note [Precision recipes]).
  OptimizerArguments options;
  options.optim = args_.optim;
  if (options.optim == "adamw_torch" && recipe_.optimizer_state_dtype == DType::bf16) {
    options.optim = "adamw_bf16";
  }
  options.optim_args = args_.optim_args;
  options.learning_rate = args_.learning_rate;
  options.weight_decay = args_.weight_decay;
  options.adam_beta1 = args_.adam_beta1;
  options.adam_beta2 = args_.adam_beta2;
  options.adam_epsilon = args_.adam_epsilon;
  options.kahan_summation = recipe_.kahan_summation;
  options.seed = static_cast<uint64_t>(args_.seed);
  // Only what trains: a frozen base (LoRA) gets no optimizer state.
  std::vector<std::pair<std::string, Tensor>> trainable;
  for (auto& [name, p] : model_->named_parameters()) {
    if (p.requires_grad()) trainable.emplace_back(name, p);
  }
  zero_stage_ = training_zero_stage(args_);
  std::vector<int> gradient_owners;  // ZeRO-2's; empty: gradients all-reduced
  // Data parallel: the offloaded optimizer takes the gradients after their reduction (train_step),
  // not from backward's hooks, which would move them before the ranks have averaged them.
  const OptimizerOffloadOptions offload_options{.ratio = offload_.optimizer_ratio,
                                                .pin_memory = offload_.pin_memory,
                                                .gradients_from_hooks = !communicator_};
  auto make_offloaded = [&](const std::vector<NamedTensor>& params) {
    auto offloaded = std::make_unique<OffloadedOptimizer>(
        params, device_,
        [&](const std::vector<NamedTensor>& share) { return make_optimizer(options, share); },
        offload_options);
    offloaded_optimizer_ = offloaded.get();
    if (offloaded->updates_in_backward()) {
      throw ValueError(str_cat("offload_optimizer with optim ", offloaded->name(),
                               ": it updates inside backward and keeps no states to offload"));
    }
    return offloaded;
  };
  if (communicator_ && zero_stage_ >= 1) {
    // ZeRO-Offload: each rank offloads its share's optimizer.
    auto zero = std::make_unique<ZeroRedundancyOptimizer>(
        communicator_, trainable, [&](const std::vector<NamedTensor>& share) {
          return offload_.optimizer ? std::unique_ptr<Optimizer>(make_offloaded(share))
                                    : make_optimizer(options, share);
        });
    // ZeRO-2 and 3: each gradient is reduced to its owner alone (Note [ZeRO-2 gradient
    // reduction]).
    if (zero_stage_ >= 2) gradient_owners = zero->owners();
    optimizer_ = std::move(zero);
  } else {
    optimizer_ = offload_.optimizer ? std::unique_ptr<Optimizer>(make_offloaded(trainable))
                                    : make_optimizer(options, trainable);
    std::map<std::string, size_t> order;
    for (size_t i = 0; i < trainable.size(); ++i) order[trainable[i].first] = i;
    std::vector<std::pair<size_t, Tensor>> ordered;
    for (const ParamGroup& group : optimizer_->param_groups()) {
      for (const auto& [name, p] : group.params) ordered.emplace_back(order.at(name), p);
    }
    std::sort(ordered.begin(), ordered.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [i, p] : ordered) clip_params_.push_back(p);
  }
  if (communicator_) {
    if (optimizer_->updates_in_backward()) {
      throw NotImplementedError(str_cat("optim ", optimizer_->name(), " with ",
                                        communicator_->world_size(), " data-parallel ranks: it "
                                        "updates inside backward, before gradients could be "
                                        "averaged over the ranks"));
    }
    // DDP's start: every rank trains rank 0's model (the same seed makes the same one; this
    // makes sure of it), frozen weights included.
    // Under ZeRO-3 a block parameter is its owner's alone (Note [ZeRO-3 parameter sharding]).
    std::vector<Tensor> whole;
    for (const auto& [name, p] : model_->named_parameters()) {
      if (zero_stage_ < 3 || !is_block_parameter(*model_, name)) whole.push_back(p);
    }
    broadcast_parameters(*communicator_, whole);
    GradientBucketOptions buckets;
    buckets.bucket_cap_bytes = static_cast<int64_t>(args_.ddp_bucket_cap_mb * (1 << 20));
    buckets.first_bucket_cap_bytes = std::min(buckets.first_bucket_cap_bytes, buckets.bucket_cap_bytes);
    std::vector<int> owners = gradient_owners;
    reducer_ = std::make_unique<GradientReducer>(communicator_, trainable, buckets,
                                                 std::move(gradient_owners));
    if (zero_stage_ >= 3) shard_parameters(trainable, owners);
  }
  if (optimizer_->updates_in_backward()) {
    if (args_.gradient_accumulation_steps > 1) {
      throw ValueError(str_cat("gradient_accumulation_steps: ", args_.gradient_accumulation_steps,
                               " with optim ", optimizer_->name(),
                               ", which updates in backward and keeps no gradients to accumulate"
                               " (limit 1)"));
    }
    if (recipe_.loss_scaling) {
      throw NotImplementedError(str_cat("optim ", optimizer_->name(),
                                        " with fp16 loss scaling is not supported; use bf16"));
    }
  }

  // HF: num_update_steps_per_epoch = len(dataloader) // gradient_accumulation_steps (at least 1).
  steps_per_epoch_ =
      std::max<int64_t>(1, data_->batches_per_epoch() / args_.gradient_accumulation_steps);
  max_steps_ = args_.max_steps > 0
                   ? args_.max_steps
                   : static_cast<int64_t>(std::ceil(args_.num_train_epochs *
                                                    static_cast<double>(steps_per_epoch_)));
  SchedulerOptions schedule;
  schedule.type = parse_scheduler_type(args_.lr_scheduler_type);
  schedule.num_training_steps = max_steps_;
  schedule.num_warmup_steps = args_.warmup_steps;
  schedule.warmup_ratio = args_.warmup_ratio;
  scheduler_ = std::make_unique<LRScheduler>(*optimizer_, schedule);
  scaler_ = std::make_unique<GradScaler>(GradScalerOptions{.enabled = recipe_.loss_scaling});

  global_step_ = 0;
  log_history_ = nlohmann::ordered_json::array();
  interval_loss_ = interval_seconds_ = 0.0;
  interval_steps_ = interval_tokens_ = total_tokens_ = 0;
  last_saved_step_ = -1;
  memory_ = MemoryBreakdown{};
  // Note [Memory breakdown at the peak]: the weights as the recipe keeps them, a 4-bit base's
  // packed weights and their statistics (buffers, not parameters) included.
  for (const Tensor& p : model_->parameters()) tag_memory(p, MemoryCategory::parameters);
  for (const Quant4bitWeight* w : weights_4bit(*model_)) {
    for (const Tensor* t : {&w->packed, &w->absmax, &w->nested_absmax, &w->nested_code}) {
      tag_memory(*t, MemoryCategory::parameters);
    }
  }
}

double Trainer::epoch() const {
  return static_cast<double>(data_->batches_consumed()) /
         static_cast<double>(data_->batches_per_epoch());
}

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
           {{"precision", recipe_.name()},
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
    const std::string file = sharded ? zero_optimizer_file(rank, world)
                                     : std::string(kOptimizerFile);
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
  const std::string dir = commit_checkpoint(args_.output_dir, global_step_, [&](const std::string& tmp) {
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
    if (rank_files) {
      communicator_->all_reduce_scalar(static_cast<double>(::getpid()), ReduceOp::sum);
      communicator_->barrier();  // every rank's files are in
    }
    if (sharded) write_zero_manifest(tmp, world, zero_stage_);
    write_checkpoint_checksums(tmp);  // last: it covers every file above
  });
  last_saved_step_ = global_step_;
  if (args_.save_total_limit) {
    for (const std::string& deleted : rotate_checkpoints(args_.output_dir, *args_.save_total_limit)) {
      print_log_line(str_cat("Deleting older checkpoint [", deleted, "] due to save_total_limit"));
    }
  }
  remove_leftovers();
  if (communicator_) communicator_->barrier();
  return dir;
}

void Trainer::print_log_line(const std::string& line) {
  if (!is_main_process()) return;
  if (progress_) {
    progress_->print_line(line);
  } else {
    std::printf("%s\n", line.c_str());
  }
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
      throw ValueError(str_cat("output_dir: '", args_.output_dir, "' holds the checkpoints of an "
                               "earlier run (", names, "); resume it with "
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
  const CheckpointContents saved = read_checkpoint(dir, scaler_->is_enabled(), device_,
                                                   lora_.has_value(), optimizer_file, fp8_file);
  const fs::path root(dir);
  // The adapters' options and base first: adapters resumed with another scaling or on other
  // weights would train on silently.
  if (lora_) {
    const std::string config_file = (root / kAdapterConfigFile).string();
    with_checkpoint_file(config_file, [&] {
      const LoraConfig saved = parse_lora_adapter_config(
          parse_json(read_text_file(config_file), config_file), config_file);
      check_resumed_lora_config(saved, *lora_, model_->config(), config_file);
    });
  }
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

void Trainer::shard_parameters(const std::vector<std::pair<std::string, Tensor>>& trainable,
                               const std::vector<int>& owners) {
  // Note [ZeRO-3 parameter sharding]: a trainable block parameter lives on the rank whose
  // optimizer updates it; a frozen one (LoRA's base) is shared out by the same rule on its own.
  std::unordered_map<std::string, int> by_name;
  for (size_t i = 0; i < trainable.size(); ++i) by_name[trainable[i].first] = owners.at(i);
  std::vector<std::string> frozen_names;
  std::vector<Tensor> frozen;
  for (auto& [name, p] : model_->named_parameters()) {
    if (p.requires_grad()) continue;
    frozen_names.push_back(name);
    frozen.push_back(p);
  }
  const std::vector<int> frozen_owners =
      partition_parameters(frozen, communicator_->world_size());
  for (size_t i = 0; i < frozen.size(); ++i) by_name[frozen_names[i]] = frozen_owners[i];
  zero_parameters_ = ZeroParameterSharding::enable(*model_, communicator_, by_name);
  // The blocks' trainable parameters stay with their owners; the rest is broadcast after a step.
  std::vector<bool> sharded;
  for (const auto& [name, p] : trainable) sharded.push_back(is_block_parameter(*model_, name));
  dynamic_cast<ZeroRedundancyOptimizer&>(*optimizer_).set_sharded(std::move(sharded));
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

Tensor Trainer::train_step(int64_t& tokens) {
  const int64_t accumulation = args_.gradient_accumulation_steps;
  const std::optional<DType> autocast_dtype = recipe_.autocast_dtype;
  // The logged loss stays on the device until the step is done: reading it here would make the
  // host wait for each forward before queueing its backward (Note [Kernel census]).
  Tensor step_loss;
  auto add_loss = [&](const Tensor& loss) {
    NoGradGuard no_grad;
    step_loss = step_loss.defined() ? add(step_loss, loss.detach()) : loss.detach();
  };
  auto forward = [&](const TokenBatch& batch) {
    StepPhase phase("forward");
    MemoryCategoryScope category(MemoryCategory::activations);
    Tensor loss;
    {
      Autocast region(device_.type, autocast_dtype, autocast_dtype.has_value());
      // ZeRO-3 and parameter offload bring each block's weights in only while it runs: casting
      // them all at the start would hold a low-precision copy of the whole model.
      const bool prefetch = autocast_dtype && zero_stage_ < 3 && !offload_.params;
      std::vector<Tensor> params;
      if (prefetch) {
        params = model_->parameters();
        std::vector<Tensor> weights;
        for (size_t i : autocast_weights_) {
          if (i < params.size()) weights.push_back(params[i]);
        }
        prefetch_autocast_casts(weights);
      }
      loss = model_->loss(batch.input_ids, batch.targets, batch.target_count);
      if (prefetch) autocast_weights_ = positions_of(autocast_cached_sources(), params);
    }
    // TE: forward scales move when the (outermost) fp8_autocast region exits.
    if (fp8_) fp8_->end_forward();
    return loss;
  };
  // TE: backward scales move when backward ends.
  auto run_backward = [&](const Tensor& loss) {
    backward(loss);
    if (fp8_) fp8_->end_backward();
  };
  if (optimizer_->updates_in_backward()) {
    // LOMO-style: each pass reruns forward (the graph is freed by backward) with the same dropout
    // masks, restored from the generator's offset; the optimizer updates inside backward.
    const TokenBatch batch = data_->next_batch();
    tokens += batch.targets.numel();
    Generator& generator = default_generator();
    const uint64_t offset = generator.offset();
    for (int pass = 0; pass < optimizer_->backward_passes(); ++pass) {
      generator.set_offset(offset);
      optimizer_->begin_backward_pass(pass);
      const Tensor loss = forward(batch);
      if (pass == 0) add_loss(loss);
      StepPhase phase("backward");
      run_backward(loss);
    }
    StepPhase phase("optimizer.step");
    optimizer_->step();
    scheduler_->step();
    return step_loss;
  }
  for (int64_t micro = 0; micro < accumulation; ++micro) {
    census_micro_batch_begins();
    const TokenBatch batch = data_->next_batch();
    tokens += batch.targets.numel();
    Tensor loss = forward(batch);
    // HF divides each micro-batch's loss by the accumulation steps and logs their sum.
    if (accumulation > 1) loss = scale(loss, 1.0 / static_cast<double>(accumulation));
    add_loss(loss);
    StepPhase phase("backward");
    // DDP's no_sync() for all but the last micro-batch: one all-reduce per optimizer step.
    if (reducer_) reducer_->set_require_sync(micro == accumulation - 1);
    run_backward(scaler_->scale(loss));
  }
  census_micro_batches_end();
  if (reducer_) {
    StepPhase phase("all_reduce gradients");
    reducer_->finish();
    if (offloaded_optimizer_) offloaded_optimizer_->take_gradients();  // the averaged ones
  }
  return step_loss;
}

Trainer::StepResult Trainer::step(bool assume_overflow) {
  StepResult result;
  const Tensor step_loss = train_step(result.tokens);
  Tensor norm;  // the clip's total norm, still on the device
  if (!optimizer_->updates_in_backward()) {
    {
      StepPhase phase("optimizer.step");
      // With offload the gradients are the host's: what unscaling, clipping and the step make
      // comes from the host pool (Note [Optimizer offload]).
      std::optional<HostPoolScope> host_scope;
      if (offloaded_optimizer_) host_scope.emplace(device_, offloaded_optimizer_->pool());
      bool overflow = assume_overflow && scaler_->is_enabled();
      if (args_.max_grad_norm > 0.0 || overflow || (communicator_ && scaler_->is_enabled())) {
        scaler_->unscale_(*optimizer_);
      }
      if (communicator_ && scaler_->is_enabled() && !overflow) {
        // Every rank skips the step when any rank found inf / NaN (with averaged gradients they
        // agree already; this keeps them in step whatever the reduction did).
        const bool found = scaler_->found_inf(*optimizer_);
        const bool any = communicator_->all_reduce_scalar(found ? 1.0 : 0.0, ReduceOp::max) > 0.0;
        overflow = any && !found;  // what this rank's unscale_ saw is recorded already
      }
      if (overflow) scaler_->record_overflow(*optimizer_);
      if (args_.max_grad_norm > 0.0) {
        // The true gradients are clipped: unscaled above.
        StepPhase clip("clip_grad_norm_");
        if (zero_stage_ >= 1 && communicator_) {
          norm = dynamic_cast<ZeroRedundancyOptimizer&>(*optimizer_)
                     .clip_grad_norm_on_device(args_.max_grad_norm);
        } else {
          norm = clip_grad_norm_on_device(clip_params_, args_.max_grad_norm);
        }
        result.grad_norm = 0.0;  // no gradient: torch's 0
        if (device_.is_meta()) result.grad_norm = NAN;
      }
      scaler_->step(*optimizer_);  // skipped when a gradient is inf / NaN
      scaler_->update();
      scheduler_->step();
    }
    StepPhase phase("optimizer.zero_grad");
    optimizer_->zero_grad();
  }
  if (fp8_) {
    // TE's is_first_microbatch: the next step quantizes the updated weights once.
    fp8_->next_step();
    fp8_counts_ = fp8_->take_counts();
  }
  // The step's one host sync, once its work is queued: the loss, and the clip's norm with it.
  Tensor read = step_loss;
  if (norm.defined()) {
    read = Tensor::empty({2}, DType::f32, device_);
    read.narrow(0, 0, 1).copy_(step_loss.reshape({1}));
    read.narrow(0, 1, 1).copy_(norm.narrow(0, 0, 1));
  }
  count_skipped_host_read(read);
  if (device_.is_meta()) {
    result.loss = NAN;  // a dry run: no values
  } else {
    const std::vector<float> values = read.to_float_vector();
    result.loss = values[0];
    if (norm.defined()) result.grad_norm = values[1];
  }
  if (communicator_) {
    // The logged loss and tokens are the global batch's (Note [Data-parallel batches equal a
    // single process's]).
    result.loss = communicator_->all_reduce_scalar(result.loss, ReduceOp::avg);
    result.tokens = static_cast<int64_t>(
        communicator_->all_reduce_scalar(static_cast<double>(result.tokens), ReduceOp::sum));
  }
  ++global_step_;
  return result;
}

void Trainer::append_metrics(const nlohmann::ordered_json& entry) {
  log_history_.push_back(entry);
  if (!is_main_process()) return;  // every rank keeps the history; rank 0 writes it
  append_line((fs::path(args_.output_dir) / "metrics.jsonl").string(), entry.dump() + "\n");
  print_log_line(format_log_line(entry));
  for (const auto& callback : callbacks_) callback->on_log(*this, entry);
}

CachingAllocator* Trainer::host_pool_in_use() const {
  return offload_.any() ? &host_pool(device_, offload_.pin_memory) : nullptr;
}

void Trainer::log_step(double loss, double grad_norm, double tokens_per_s) {
  nlohmann::ordered_json entry = {{"loss", loss}};
  entry["grad_norm"] = std::isnan(grad_norm) ? nlohmann::ordered_json() : nlohmann::ordered_json(grad_norm);
  entry["lr"] = optimizer_->lr();
  entry["epoch"] = epoch();
  entry["step"] = global_step_;
  entry["loss_scale"] = scaler_->get_scale();
  entry["tokens_per_s"] = tokens_per_s;
  if (fp8_) {
    // The logged step's values that FP8 clamped to its largest and flushed to zero.
    entry["fp8_overflow"] = fp8_counts_.first;
    entry["fp8_underflow"] = fp8_counts_.second;
  }
  entry["peak_allocated_bytes"] = static_cast<int64_t>(max_memory_allocated(device_));
  entry["peak_reserved_bytes"] = static_cast<int64_t>(max_memory_reserved(device_));
  if (const CachingAllocator* pool = host_pool_in_use()) {
    // Offload's host pool (Note [The host pool]), on a GPU or on the CPU.
    const DeviceStats host = pool->stats();
    entry["host_peak_allocated_bytes"] = host.allocated_bytes[static_cast<size_t>(StatType::all)].peak;
    entry["host_peak_reserved_bytes"] = host.reserved_bytes[static_cast<size_t>(StatType::all)].peak;
  } else if (!device_.is_cpu()) {
    // The host's share of a GPU run (pinned batches): the CPU's allocator.
    entry["host_peak_allocated_bytes"] = static_cast<int64_t>(max_memory_allocated(kCPU));
    entry["host_peak_reserved_bytes"] = static_cast<int64_t>(max_memory_reserved(kCPU));
  }
  append_metrics(entry);
}

void Trainer::log_eval() {
  const auto start = Clock::now();
  const EvalResult result = evaluate();
  if (result.tokens == 0) return;
  nlohmann::ordered_json entry = {{"eval_loss", result.loss},
                                  {"eval_perplexity", result.perplexity},
                                  {"eval_tokens", result.tokens},
                                  {"eval_runtime", seconds_since(start)},
                                  {"epoch", epoch()},
                                  {"step", global_step_}};
  append_metrics(entry);
}

EvalResult Trainer::evaluate() {
  const int64_t batch = args_.per_device_eval_batch_size;
  if (!communicator_) {
    return evaluate_batches(
        *model_, data_->eval_batch_count(batch),
        [&](int64_t i) { return data_->eval_batch(i, batch); }, device_, recipe_.autocast_dtype);
  }
  // Sharded: rank r scores batches r, r + W, ...; the token-weighted sums are reduced.
  const int64_t world = communicator_->world_size(), rank = communicator_->rank();
  const int64_t total_batches = data_->eval_batch_count(batch);
  const int64_t mine = total_batches > rank ? (total_batches - rank + world - 1) / world : 0;
  EvalResult local = evaluate_batches(
      *model_, mine, [&](int64_t i) { return data_->eval_batch(i * world + rank, batch); },
      device_, recipe_.autocast_dtype);
  if (zero_parameters_) {
    // ZeRO-3 gathers each block with collectives, so every rank runs as many forwards: a rank
    // with a batch fewer scores batch 0 once more and drops it (FSDP hangs on uneven inputs).
    const int64_t most = (total_batches + world - 1) / world;
    evaluate_batches(*model_, most - mine, [&](int64_t) { return data_->eval_batch(0, batch); },
                     device_, recipe_.autocast_dtype);
  }
  const double loss_sum = local.tokens > 0 ? local.loss * static_cast<double>(local.tokens) : 0.0;
  EvalResult result;
  result.tokens = static_cast<int64_t>(
      communicator_->all_reduce_scalar(static_cast<double>(local.tokens), ReduceOp::sum));
  const double total = communicator_->all_reduce_scalar(loss_sum, ReduceOp::sum);
  result.loss = result.tokens > 0 ? total / static_cast<double>(result.tokens) : NAN;
  result.perplexity = std::exp(result.loss);
  return result;
}

double Trainer::communication_wait_seconds() const {
  return reducer_ ? reducer_->wait_seconds() : 0.0;
}

void Trainer::add_callback(std::shared_ptr<TrainerCallback> callback) {
  callbacks_.push_back(std::move(callback));
}

int Trainer::train() {
  if (is_main_process()) prepare_output_dir();
  if (communicator_) communicator_->barrier();  // rank 0 has cleared what a fresh run replaces
  if (!args_.resume_from_checkpoint.empty()) resume();
  fs::create_directories(args_.output_dir);
  if (is_main_process()) {
    // metrics.jsonl holds this run's log_history: a resumed run starts from the checkpoint's.
    std::string lines;
    for (const auto& entry : log_history_) lines += entry.dump() + "\n";
    write_file_atomically((fs::path(args_.output_dir) / "metrics.jsonl").string(), lines);
  }
  // A 4-bit base's weights are buffers but still the model's parameters (PEFT counts them too).
  int64_t num_parameters = model_->num_parameters();
  for (const Quant4bitWeight* w : weights_4bit(*model_)) num_parameters += w->numel();
  if (is_main_process() && communicator_) {
    std::printf("Data-parallel over %d ranks (%s): a global batch of %lld windows per step\n",
                communicator_->world_size(), communicator_->backend().c_str(),
                static_cast<long long>(args_.per_device_train_batch_size *
                                       args_.gradient_accumulation_steps *
                                       communicator_->world_size()));
  }
  if (is_main_process()) std::printf("Training %s (%.2fM parameters, %s) on %s: %lld steps of %lld x %lld windows of %lld "
              "tokens, %lld micro-batches per epoch\n",
              args_.model.c_str(), static_cast<double>(num_parameters) / 1e6,
              recipe_.name().c_str(), device_.str().c_str(), static_cast<long long>(max_steps_),
              static_cast<long long>(args_.gradient_accumulation_steps),
              static_cast<long long>(args_.per_device_train_batch_size),
              static_cast<long long>(window_ - 1),
              static_cast<long long>(data_->batches_per_epoch()));
  if (lora_ && is_main_process()) {
    // PEFT's print_trainable_parameters.
    int64_t trainable = 0;
    for (const auto& [name, p] : lora_state_dict(*model_)) trainable += p.numel();
    const int64_t all = num_parameters;
    std::printf("LoRA r %lld on %s: trainable params: %lld || all params: %lld || trainable%%: "
                "%.4f\n",
                static_cast<long long>(lora_->r),
                args_.lora_target_modules.empty() ? "the default targets"
                                                  : args_.lora_target_modules.c_str(),
                static_cast<long long>(trainable), static_cast<long long>(all),
                100.0 * static_cast<double>(trainable) / static_cast<double>(all));
  }
  std::fflush(stdout);
  ProgressBar progress(max_steps_, global_step_,
                       isatty(STDERR_FILENO) && !args_.disable_tqdm && is_main_process());
  progress_ = &progress;
  // Also when a step or a log write throws: the bar is a local of this call.
  struct DetachProgress {
    ProgressBar*& bar;
    ~DetachProgress() { bar = nullptr; }
  } detach_progress{progress_};
  const int64_t eval_steps = args_.eval_steps.value_or(args_.logging_steps);
  if (args_.eval_strategy == "steps" && is_main_process() &&
      data_->eval_batch_count(args_.per_device_eval_batch_size) == 0) {
    std::fprintf(stderr, "warning: eval_strategy=steps, but the data has no eval split "
                         "(validation_split_percentage %g): no evaluation\n",
                 args_.validation_split_percentage);
  }
  // The report is of this run: earlier work in the process (a test, a failed resume) not counted.
  reset_peak_memory_stats(device_);
  if (!device_.is_cpu()) reset_peak_memory_stats(kCPU);
  if (CachingAllocator* pool = host_pool_in_use()) pool->reset_peak_stats();
  const auto run_start = Clock::now();
  const int64_t tokens_at_start = total_tokens_;  // a resumed run's rate counts its own tokens
  int stop_signal = 0;
  for (const auto& callback : callbacks_) callback->on_train_begin(*this);
  while (global_step_ < max_steps_) {
    const auto step_start = Clock::now();
    const StepResult result = step();
    const double loss = result.loss;
    const double grad_norm = result.grad_norm;
    const int64_t tokens = result.tokens;
    const double step_seconds = seconds_since(step_start);
    for (const auto& callback : callbacks_) callback->on_step_end(*this);
    total_tokens_ += tokens;
    interval_loss_ += loss;
    interval_steps_ += 1;
    interval_tokens_ += tokens;
    interval_seconds_ += step_seconds;
    progress.update(global_step_, loss, optimizer_->lr(), static_cast<double>(tokens) / step_seconds,
                    static_cast<int64_t>(max_memory_allocated(device_)));
    if (global_step_ % args_.logging_steps == 0 || (args_.logging_first_step && global_step_ == 1) ||
        global_step_ == max_steps_) {
      log_step(interval_loss_ / static_cast<double>(interval_steps_), grad_norm,
               static_cast<double>(interval_tokens_) / interval_seconds_);
      interval_loss_ = interval_seconds_ = 0.0;
      interval_steps_ = interval_tokens_ = 0;
    }
    if (args_.eval_strategy == "steps" && global_step_ % eval_steps == 0) log_eval();
    if (args_.save_strategy == "steps" && global_step_ % args_.save_steps == 0) save_checkpoint();
    stop_signal = training_stop_requested();
    // A signal reaches the ranks at different moments: they stop after the same step.
    if (communicator_) {
      stop_signal = static_cast<int>(
          communicator_->all_reduce_scalar(static_cast<double>(stop_signal), ReduceOp::max));
    }
    if (stop_signal != 0) break;
  }
  if (stop_signal != 0) {
    g_stop_signal.store(0);
    if (last_saved_step_ != global_step_) save_checkpoint();
    progress.finish();
    if (is_main_process()) std::printf("Stopped by signal %d after step %lld; checkpoint saved in %s\n", stop_signal,
                static_cast<long long>(global_step_),
                (fs::path(args_.output_dir) / str_cat(kCheckpointPrefix, global_step_)).c_str());
  } else {
    progress.finish();
    const double runtime = seconds_since(run_start);
    nlohmann::ordered_json summary = {
        {"train_runtime", runtime},
        {"train_tokens_per_second", static_cast<double>(total_tokens_ - tokens_at_start) / runtime},
        {"train_tokens", total_tokens_},
        {"step", global_step_}};
    // Data-parallel: rank 0's wait for the gradient all-reduces after backward, the part of the
    // communication that backward did not hide.
    if (communicator_) summary["train_communication_wait_seconds"] = reducer_->wait_seconds();
    log_history_.push_back(summary);
    if (is_main_process()) std::printf("%s\n", format_log_line(summary).c_str());
  }
  progress_ = nullptr;
  for (const auto& callback : callbacks_) callback->on_train_end(*this);
  finish_run(stop_signal != 0);
  return stop_signal != 0 ? 128 + stop_signal : 0;
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

void Trainer::finish_run(bool stopped) {
  const fs::path out(args_.output_dir);
  // The report is of training; under ZeRO-3 the whole model is gathered after it into rank 0's
  // host memory, for it to write.
  memory_ = MemoryBreakdown::of_device(device_);
  if (!is_main_process()) {
    // Rank 0 writes the results; the others' memory is theirs (each rank's peak, as each GPU's).
    HostGatheredParameters whole(zero_parameters_.get(), 0);
    g_stop_signal.store(0);
    communicator_->barrier();
    return;
  }
  std::printf("%s%s", memory_summary(device_).c_str(), memory_.format().c_str());
  nlohmann::ordered_json memory_json = memory_report_json(memory_, device_);
  if (const CachingAllocator* pool = host_pool_in_use()) {
    // Offload's host pool beside the device (Note [The host pool]).
    std::printf("%s", host_pool_summary(*pool, /*abbreviated=*/true).c_str());
    memory_json["host_pool_stats"] = host_pool_stats(*pool);
  }
  HostGatheredParameters whole(zero_parameters_.get(), 0);
  if (!stopped) {
    // As run_clm's trainer.save_model(): the trained model, its tokenizer (so that `headroom
    // eval --model output_dir` tokenizes as training did) and the state in output_dir itself.
    save_model_files(args_.output_dir);
    write_file_atomically((out / kTrainerStateFile).string(), dump_json(trainer_state()));
  }
  write_file_atomically((out / "memory.json").string(), dump_json(memory_json));

  // The optional steps: a failure is a warning, and a stop signal skips what is left; the run's
  // results are saved above and its exit status stays.
  if (!stopped && args_.sample_max_new_tokens > 0) {
    if (zero_parameters_) {
      // Generating would gather every block on every rank in step with rank 0.
      std::printf("The sample is skipped under zero_stage 3: the blocks are sharded over the "
                  "ranks\n");
    } else {
      optional_end_step("the sample", [&] { print_sample(); });
    }
  }
  g_stop_signal.store(0);
  std::fflush(stdout);
  if (communicator_) communicator_->barrier();  // the files are whole when any rank returns
}

void Trainer::optional_end_step(const char* what, const std::function<void()>& run) {
  if (const int signal = training_stop_requested(); signal != 0) {
    std::fprintf(stderr, "headroom: %s skipped: stopped by signal %d\n", what, signal);
    return;
  }
  try {
    run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "headroom: warning: %s failed (the run's results are saved): %s\n", what,
                 e.what());
  }
}

void Trainer::print_sample() {
  std::vector<int32_t> prompt = tokenizer_->encode(args_.sample_prompt);
  if (prompt.empty()) prompt.push_back(tokenizer_->eos_token_id().value_or(0));
  const std::vector<int32_t> ids =
      generate(*model_, prompt,
               {.max_new_tokens = args_.sample_max_new_tokens, .temperature = 0.8, .top_k = 40,
                .seed = static_cast<uint64_t>(args_.seed),
                .autocast_dtype = recipe_.autocast_dtype,
                .stop = [] { return training_stop_requested() != 0; }});
  if (training_stop_requested() != 0) return;  // cut short: not shown
  sample_ = tokenizer_->decode(ids);
  std::printf("--- sample (top-k 40, temperature 0.8) ---\n%s\n---\n", sample_.c_str());
}

int run_training(const TrainingArguments& args,
                 std::vector<std::shared_ptr<TrainerCallback>> callbacks,
                 const nlohmann::ordered_json& options) {
  // Before the Trainer starts any thread (Note [Stop signals are taken by one thread]).
  const StopSignalWatcher stop_signals;
  const LaunchEnvironment launch = launch_environment();
  if (!args.deepspeed.empty() && launch.rank == 0) {
    // What the file asks for that headroom does not do is said, not dropped silently.
    const std::string warning =
        deepspeed_ignored_keys_warning(args.deepspeed, read_deepspeed_config(args.deepspeed));
    if (!warning.empty()) std::fprintf(stderr, "%s\n", warning.c_str());
  }
  if (launch.distributed()) {
    // One process per GPU: local rank k trains on cuda:k.
    TrainingArguments rank_args = args;
    Device device = resolve_device(args.device);
    if (device.is_cuda()) {
      device.index = launch.local_rank;
      rank_args.device = str_cat("cuda:", launch.local_rank);
    }
    try {
      std::shared_ptr<Communicator> communicator = make_communicator(launch, device);
      if (!options.empty()) {
        // Note [Every rank runs rank 0's options]: before any rank can wait for another.
        const std::string difference = rank_options_difference(*communicator, options);
        if (!difference.empty()) {
          if (launch.rank == 0) std::fprintf(stderr, "headroom: error: %s\n", difference.c_str());
          return 2;
        }
      }
      Trainer trainer(rank_args, {}, communicator);
      for (auto& callback : callbacks) trainer.add_callback(std::move(callback));
      return trainer.train();
    } catch (const std::exception& e) {
      // The other ranks may wait in a collective for this one: end them all now.
      abort_mpi_job(e.what(), 1);
    }
  }
  auto train = [&](std::unique_ptr<Trainer>& trainer) {
    trainer = std::make_unique<Trainer>(args);
    for (auto& callback : callbacks) trainer->add_callback(std::move(callback));
    return trainer->train();
  };
  std::unique_ptr<Trainer> trainer;
  if (args.memory_snapshot.empty()) return train(trainer);

  // torch.cuda.memory._record_memory_history() before the model exists, so that the snapshot
  // holds every allocation of the run (the last 100000 events per device).
  record_memory_history();
  struct StopRecording {
    ~StopRecording() { record_memory_history(0); }
  } stop_recording;
  int code = 0;
  try {
    code = train(trainer);
  } catch (const OutOfMemoryError&) {
    // The trainer is still alive here: its parameters, gradients and optimizer states are in the
    // snapshot's segments, and the step's allocations up to the failed one in its history.
    try {
      dump_memory_snapshot(args.memory_snapshot);
      std::fprintf(stderr, "headroom: memory snapshot at out-of-memory written to %s\n",
                   args.memory_snapshot.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "headroom: warning: no memory snapshot: %s\n", e.what());
    }
    throw;
  }
  dump_memory_snapshot(args.memory_snapshot);
  std::printf("Memory snapshot written to %s (open it in https://pytorch.org/memory_viz)\n",
              args.memory_snapshot.c_str());
  return code;
}

EvalResult evaluate_file(const AdapterBaseRequest& request, const std::string& data,
                         int64_t max_seq_length, int64_t batch_size, const std::string& device,
                         const std::string& adapter) {
  if (batch_size < 1) throw ValueError(str_cat("batch_size: ", batch_size, " is below 1"));
  const Device target = resolve_device(device);
  const AdapterBase base = resolve_adapter_base(request, adapter);
  if (!base.preset) {
    // Training may start from a config alone (HF initialises the weights); scoring such a model
    // would report a random model's loss as this directory's, but for an adapter trained on
    // that draw (its record names the seed).
    const fs::path dir(base.model);
    const bool drawn = !adapter.empty() && read_adapter_base(adapter);
    if (!base.weights_loaded && !drawn) {
      throw ValueError(str_cat("model: directory '", base.model, "' has no weights (",
                               (dir / kSafetensorsWeightsName).string(), " or ",
                               kSafetensorsIndexName, " is missing): nothing to evaluate"));
    }
    verify_checkpoint_checksums(base.model);  // a checkpoint's files as they were saved
  }
  // An adapter checkpoint's files as they were saved, as a model checkpoint's.
  if (!adapter.empty()) verify_checkpoint_checksums(adapter);
  ModelAndTokenizer loaded = load_adapter_base(base, target);
  // Made as training made it (a bf16 frozen base, say), scored in fp32: the conversion is exact,
  // and the adapters then load in fp32 as training keeps them under autocast.
  loaded.model->to(DType::f32);
  if (!adapter.empty()) load_lora_adapter(*loaded.model, adapter, DType::f32);
  const int64_t context = context_length(loaded.model->config());
  const int64_t t = max_seq_length > 0 ? max_seq_length : context;
  if (t > context) {
    throw ValueError(str_cat("max_seq_length: ", t, " exceeds the model's context length ", context));
  }
  // No token cache: eval writes nothing, and has no output_dir to put one in.
  const std::shared_ptr<const TokenCorpus> tokens = load_token_corpus(data, *loaded.tokenizer);
  // Consecutive, disjoint windows of T + 1 tokens, unlike training's sequences, which advance
  // by T (Note [Packing and the eval split]): this is what `headroom eval` specifies.
  const int64_t window = t + 1;
  const PackedSequences windows(tokens, 0, tokens->size(), t, /*stride=*/window);
  if (windows.empty()) {
    throw ValueError(str_cat("data '", data, "': ", tokens->size(),
                             " tokens, fewer than one window of ", window,
                             " (max_seq_length + 1)"));
  }
  const DataLoader loader(windows, {.batch_size = batch_size, .shuffle = false});
  auto batch_at = [&](int64_t index) {
    TokenBatch batch = loader.batch_at(0, index);
    if (!target.is_cpu()) {
      batch = {batch.input_ids.to(target), batch.targets.to(target), batch.target_count};
    }
    return batch;
  };
  return evaluate_batches(*loaded.model, loader.size(), batch_at, target,
                          std::nullopt);
}

}  // namespace headroom

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
#include "train/model_assembly.h"
#include "train/optimizer_assembly.h"
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

std::string dump_json(const nlohmann::ordered_json& value) { return value.dump(2) + "\n"; }

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

void request_training_stop(int signal_number) { g_stop_signal.store(signal_number); }

int training_stop_requested() { return g_stop_signal.load(); }

Trainer::Trainer(TrainingConfig config, BatchSourceFactory make_data,
                 std::shared_ptr<Communicator> communicator)
    : config_(std::move(config)), make_data_(std::move(make_data)) {
  if (!make_data_) make_data_ = make_data_loader_batch_source;
  if (communicator && communicator->world_size() > 1) {
    if (communicator->device() != config_.device) {
      throw ValueError(str_cat("device: ", config_.device, ", but the data-parallel communicator (",
                               communicator->backend(), ") carries ", communicator->device(),
                               " tensors"));
    }
    communicator_ = std::move(communicator);
  }
  build();
}

Trainer::Trainer(const TrainingArguments& args, BatchSourceFactory make_data,
                 std::shared_ptr<Communicator> communicator)
    : Trainer(resolve_training_config(args), std::move(make_data), std::move(communicator)) {}

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
  AssembledModel assembled = assemble_model(
      config_,
      {communicator_ ? communicator_->rank() : 0, communicator_ ? communicator_->world_size() : 1});
  model_ = std::move(assembled.model);
  tokenizer_ = std::move(assembled.tokenizer);
  adapter_base_ = std::move(assembled.adapter_base);
  fp8_ = std::move(assembled.fp8);
  offload_ = assembled.offload;
  window_ = assembled.window;
  lora_ = config_.lora;
  offloaded_optimizer_ = nullptr;
  data_ = make_data_(args_, *tokenizer_, window_, config_.device);
  if (communicator_) {
    data_ = std::make_unique<ShardedBatchSource>(std::move(data_), communicator_->rank(),
                                                 communicator_->world_size());
  }
  // Note [Targets counted by the caller]: the batches' ids were checked against the tokenizer's
  // vocabulary (which fits the model's, load_model_and_tokenizer) as the tokens were made.
  if (data_->ids_checked()) model_->input_embeddings().set_id_check(IdCheck::by_caller);

  // Only what trains: a frozen base (LoRA) gets no optimizer state.
  std::vector<NamedTensor> trainable;
  for (auto& [name, p] : model_->named_parameters()) {
    if (p.requires_grad()) trainable.emplace_back(name, p);
  }
  AssembledOptimizer optimizer =
      assemble_optimizer(config_, trainable, offload_, config_.device, communicator_);
  optimizer_ = std::move(optimizer.optimizer);
  offloaded_optimizer_ = optimizer.offloaded;
  clip_params_ = std::move(optimizer.clip_params);
  std::vector<int> gradient_owners = std::move(optimizer.gradient_owners);
  if (communicator_) start_data_parallel(trainable, std::move(gradient_owners));
  if (optimizer_->updates_in_backward()) {
    if (args_.gradient_accumulation_steps > 1) {
      throw ValueError(str_cat("gradient_accumulation_steps: ", args_.gradient_accumulation_steps,
                               " with optim ", optimizer_->name(),
                               ", which updates in backward and keeps no gradients to accumulate"
                               " (limit 1)"));
    }
    if (config_.recipe.loss_scaling) {
      throw NotImplementedError(str_cat("optim ", optimizer_->name(),
                                        " with fp16 loss scaling is not supported; use bf16"));
    }
  }

  start_schedule();
  reset_run_state();
}

void Trainer::start_schedule() {
  // HF: num_update_steps_per_epoch = len(dataloader) // gradient_accumulation_steps (at least 1).
  steps_per_epoch_ =
      std::max<int64_t>(1, data_->batches_per_epoch() / args_.gradient_accumulation_steps);
  max_steps_ = args_.max_steps > 0
                   ? args_.max_steps
                   : static_cast<int64_t>(
                         std::ceil(args_.num_train_epochs * static_cast<double>(steps_per_epoch_)));
  SchedulerOptions schedule;
  schedule.type = config_.lr_scheduler;
  schedule.num_training_steps = max_steps_;
  schedule.num_warmup_steps = args_.warmup_steps;
  schedule.warmup_ratio = args_.warmup_ratio;
  scheduler_ = std::make_unique<LRScheduler>(*optimizer_, schedule);
  scaler_ = std::make_unique<GradScaler>(GradScalerOptions{.enabled = config_.recipe.loss_scaling});
}

void Trainer::reset_run_state() {
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

Tensor Trainer::train_step(int64_t& tokens) {
  const int64_t accumulation = args_.gradient_accumulation_steps;
  const std::optional<DType> autocast_dtype = config_.recipe.autocast_dtype;
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
      Autocast region(config_.device.type, autocast_dtype, autocast_dtype.has_value());
      // ZeRO-3 and parameter offload bring each block's weights in only while it runs: casting
      // them all at the start would hold a low-precision copy of the whole model.
      const bool prefetch = autocast_dtype && config_.zero_stage < 3 && !offload_.params;
      std::vector<Tensor> params;
      if (prefetch) {
        params = model_->parameters();
        std::vector<Tensor> weights;
        for (size_t i : autocast_weights_) {
          if (i < params.size()) weights.push_back(params[i]);
        }
        prefetch_autocast_casts(weights);
      }
      // A packed batch's boundaries (none, and nothing allocated, for an unpacked one).
      const SequenceBoundaries sequences =
          make_sequence_boundaries(batch.cu_seqlens, batch.input_ids.size(0),
                                   batch.input_ids.size(1), batch.input_ids.device());
      loss = model_->loss(batch.input_ids, batch.targets, batch.target_count, sequences);
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
  // Note [Scored tokens across accumulation]
  // transformers divides each micro-batch's summed loss by num_items_in_batch, the targets scored
  // over the step's micro-batches, counted by fetching them all first. Windows of plain text score
  // every target, so their micro-batches weigh alike: each mean loss / accumulation steps, one
  // batch fetched at a time, as HF without num_items_in_batch. Rows (varying_targets) and packed
  // batches score different numbers, so when the first micro-batch is one and counts its targets,
  // the step's others are fetched with it and each mean is weighted by its share of the targets
  // (of all ranks', average_tokens_across_devices: DDP's mean then sums them).
  std::vector<TokenBatch> ahead;  // the step's micro-batches, fetched with a packed first one
  std::vector<double> weights(static_cast<size_t>(accumulation),
                              1.0 / static_cast<double>(accumulation));
  for (int64_t micro = 0; micro < accumulation; ++micro) {
    census_micro_batch_begins();
    const auto m = static_cast<size_t>(micro);
    TokenBatch batch = m < ahead.size() ? std::move(ahead[m]) : data_->next_batch();
    const bool across_ranks = communicator_ && args_.average_tokens_across_devices;
    if (micro == 0 && (accumulation > 1 || across_ranks) &&
        (batch.varying_targets || !batch.cu_seqlens.empty()) && batch.target_count >= 0) {
      weigh_micro_batches(batch, ahead, weights);
    }
    tokens += batch.targets.numel();
    Tensor loss = forward(batch);
    // HF divides each micro-batch's loss by the accumulation steps (or weights it by its scored
    // targets) and logs their sum.
    if (weights[m] != 1.0) loss = scale(loss, weights[m]);
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
      if (offloaded_optimizer_) host_scope.emplace(config_.device, offloaded_optimizer_->pool());
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
        if (config_.zero_stage >= 1 && communicator_) {
          norm = dynamic_cast<ZeroRedundancyOptimizer&>(*optimizer_)
                     .clip_grad_norm_on_device(args_.max_grad_norm);
        } else {
          norm = clip_grad_norm_on_device(clip_params_, args_.max_grad_norm);
        }
        result.grad_norm = 0.0;  // no gradient: torch's 0
        if (config_.device.is_meta()) result.grad_norm = NAN;
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
    read = Tensor::empty({2}, DType::f32, config_.device);
    read.narrow(0, 0, 1).copy_(step_loss.reshape({1}));
    read.narrow(0, 1, 1).copy_(norm.narrow(0, 0, 1));
  }
  count_skipped_host_read(read);
  if (config_.device.is_meta()) {
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

CachingAllocator* Trainer::host_pool_in_use() const {
  return offload_.any() ? &host_pool(config_.device, offload_.pin_memory) : nullptr;
}

EvalResult Trainer::log_eval() {
  const auto start = Clock::now();
  const EvalResult result = evaluate();
  if (result.tokens == 0) return result;
  nlohmann::ordered_json entry = {{"eval_loss", result.loss},
                                  {"eval_perplexity", result.perplexity},
                                  {"eval_tokens", result.tokens},
                                  {"eval_runtime", seconds_since(start)},
                                  {"epoch", epoch()},
                                  {"step", global_step_}};
  append_metrics(entry);
  return result;
}

EvalResult Trainer::evaluate() {
  const int64_t batch = args_.per_device_eval_batch_size;
  if (!communicator_) {
    return evaluate_batches(
        *model_, data_->eval_batch_count(batch),
        [&](int64_t i) { return data_->eval_batch(i, batch); }, config_.device,
        config_.recipe.autocast_dtype);
  }
  // Sharded: rank r scores batches r, r + W, ...; the token-weighted sums are reduced.
  const int64_t world = communicator_->world_size(), rank = communicator_->rank();
  const int64_t total_batches = data_->eval_batch_count(batch);
  const int64_t mine = total_batches > rank ? (total_batches - rank + world - 1) / world : 0;
  EvalResult local = evaluate_batches(
      *model_, mine, [&](int64_t i) { return data_->eval_batch(i * world + rank, batch); },
      config_.device, config_.recipe.autocast_dtype);
  if (zero_parameters_) {
    // ZeRO-3 gathers each block with collectives, so every rank runs as many forwards: a rank
    // with a batch fewer scores batch 0 once more and drops it (FSDP hangs on uneven inputs).
    const int64_t most = (total_batches + world - 1) / world;
    evaluate_batches(
        *model_, most - mine, [&](int64_t) { return data_->eval_batch(0, batch); }, config_.device,
        config_.recipe.autocast_dtype);
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
    std::printf(
        "Data-parallel over %d ranks (%s): a global batch of %lld windows per step\n",
        communicator_->world_size(), communicator_->backend().c_str(),
        static_cast<long long>(args_.per_device_train_batch_size *
                               args_.gradient_accumulation_steps * communicator_->world_size()));
  }
  if (is_main_process())
    std::printf(
        "Training %s (%.2fM parameters, %s) on %s: %lld steps of %lld x %lld %s %lld "
        "tokens, %lld micro-batches per epoch\n",
        args_.model.c_str(), static_cast<double>(num_parameters) / 1e6,
        config_.recipe.name().c_str(), config_.device.str().c_str(),
        static_cast<long long>(max_steps_),
        static_cast<long long>(args_.gradient_accumulation_steps),
        static_cast<long long>(args_.per_device_train_batch_size),
        data_->serves_rows() ? "rows of up to" : "windows of", static_cast<long long>(window_ - 1),
        static_cast<long long>(data_->batches_per_epoch()));
  if (lora_ && is_main_process()) {
    // PEFT's print_trainable_parameters.
    int64_t trainable = 0;
    for (const auto& [name, p] : lora_state_dict(*model_)) trainable += p.numel();
    const int64_t all = num_parameters;
    std::printf(
        "LoRA r %lld on %s: trainable params: %lld || all params: %lld || trainable%%: "
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
  if (config_.eval_strategy == IntervalStrategy::steps && is_main_process() &&
      data_->eval_batch_count(args_.per_device_eval_batch_size) == 0) {
    std::fprintf(stderr,
                 "warning: eval_strategy=steps, but the data has no eval split "
                 "(validation_split_percentage %g): no evaluation\n",
                 args_.validation_split_percentage);
  }
  // The report is of this run: earlier work in the process (a test, a failed resume) not counted.
  reset_peak_memory_stats(config_.device);
  if (!config_.device.is_cpu()) reset_peak_memory_stats(kCPU);
  if (CachingAllocator* pool = host_pool_in_use()) pool->reset_peak_stats();
  const auto run_start = Clock::now();
  const int64_t tokens_at_start = total_tokens_;  // a resumed run's rate counts its own tokens
  int stop_signal = 0;
  bool target_reached = false;
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
    progress.update(global_step_, loss, optimizer_->lr(),
                    static_cast<double>(tokens) / step_seconds,
                    static_cast<int64_t>(max_memory_allocated(config_.device)));
    if (global_step_ % args_.logging_steps == 0 ||
        (args_.logging_first_step && global_step_ == 1) || global_step_ == max_steps_) {
      log_step(interval_loss_ / static_cast<double>(interval_steps_), grad_norm,
               static_cast<double>(interval_tokens_) / interval_seconds_);
      interval_loss_ = interval_seconds_ = 0.0;
      interval_steps_ = interval_tokens_ = 0;
    }
    if (config_.eval_strategy == IntervalStrategy::steps && global_step_ % eval_steps == 0) {
      // Every rank holds the same (reduced) eval loss, so all of them stop after this step.
      const EvalResult eval = log_eval();
      target_reached =
          args_.eval_loss_target > 0.0 && eval.tokens > 0 && eval.loss <= args_.eval_loss_target;
    }
    if (config_.save_strategy == IntervalStrategy::steps && global_step_ % args_.save_steps == 0)
      save_checkpoint();
    stop_signal = training_stop_requested();
    // A signal reaches the ranks at different moments: they stop after the same step.
    if (communicator_) {
      stop_signal = static_cast<int>(
          communicator_->all_reduce_scalar(static_cast<double>(stop_signal), ReduceOp::max));
    }
    if (stop_signal != 0 || target_reached) break;
  }
  if (stop_signal != 0) {
    g_stop_signal.store(0);
    if (last_saved_step_ != global_step_) save_checkpoint();
    progress.finish();
    if (is_main_process())
      std::printf("Stopped by signal %d after step %lld; checkpoint saved in %s\n", stop_signal,
                  static_cast<long long>(global_step_),
                  (fs::path(args_.output_dir) / str_cat(kCheckpointPrefix, global_step_)).c_str());
  } else {
    progress.finish();
    if (target_reached && is_main_process()) {
      std::printf("Eval loss at or below eval_loss_target %g after step %lld of %lld: done\n",
                  args_.eval_loss_target, static_cast<long long>(global_step_),
                  static_cast<long long>(max_steps_));
    }
    const double runtime = seconds_since(run_start);
    nlohmann::ordered_json summary = {
        {"train_runtime", runtime},
        {"train_tokens_per_second", static_cast<double>(total_tokens_ - tokens_at_start) / runtime},
        {"train_tokens", total_tokens_},
        {"step", global_step_}};
    if (target_reached) summary["eval_loss_target_reached"] = true;
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

void Trainer::finish_run(bool stopped) {
  const fs::path out(args_.output_dir);
  // The report is of training; under ZeRO-3 the whole model is gathered after it into rank 0's
  // host memory, for it to write.
  memory_ = MemoryBreakdown::of_device(config_.device);
  if (!is_main_process()) {
    // Rank 0 writes the results; the others' memory is theirs (each rank's peak, as each GPU's).
    HostGatheredParameters whole(zero_parameters_.get(), 0);
    g_stop_signal.store(0);
    communicator_->barrier();
    return;
  }
  std::printf("%s%s", memory_summary(config_.device).c_str(), memory_.format().c_str());
  nlohmann::ordered_json memory_json = memory_report_json(memory_, config_.device);
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
      std::printf(
          "The sample is skipped under zero_stage 3: the blocks are sharded over the "
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
               {.max_new_tokens = args_.sample_max_new_tokens,
                .temperature = 0.8,
                .top_k = 40,
                .seed = static_cast<uint64_t>(args_.seed),
                .autocast_dtype = config_.recipe.autocast_dtype,
                .stop = [] { return training_stop_requested() != 0; }});
  if (training_stop_requested() != 0) return;  // cut short: not shown
  sample_ = tokenizer_->decode(ids);
  std::printf("--- sample (top-k 40, temperature 0.8) ---\n%s\n---\n", sample_.c_str());
}

}  // namespace headroom

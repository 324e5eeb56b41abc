// The training loop behind `headroom train` and the evaluation behind `headroom eval`.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/grad_scaler.h"
#include "amp/precision.h"
#include "dist/communicator.h"
#include "io/tokenizer.h"
#include "nn/causal_lm.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "peft/lora_config.h"
#include "quant/fp8_linear.h"
#include "quant/quant_4bit.h"
#include "train/adapter_base.h"
#include "train/batch_source.h"
#include "train/evaluation.h"
#include "train/memory_report.h"
#include "train/trainer_callback.h"
#include "train/training_arguments.h"
#include "train/run_training.h"  // run_training, for the Trainer's callers
#include "train/training_config.h"

namespace headroom {

class ProgressBar;            // train/progress.h
class GradientReducer;        // dist/gradient_reducer.h
class ZeroParameterSharding;  // dist/zero_parameters.h
class OffloadedOptimizer;     // optim/optimizer_offload.h
class CachingAllocator;       // memory/caching_allocator.h

// Asks the running Trainer to stop after its current step, save a checkpoint and return
// 128 + signal_number. Only stores to a lock-free atomic, so signal handlers may call it.
void request_training_stop(int signal_number);
// The pending request's signal number, or 0.
int training_stop_requested();

// How the trainer gets its data (default: data/'s DataLoader, through DataLoaderBatchSource).
// `window` is max_seq_length + 1 tokens; batches go to `device`.
using BatchSourceFactory = std::function<std::unique_ptr<BatchSource>(
    const TrainingArguments& args, const Tokenizer& tokenizer, int64_t window, Device device)>;

// HF's Trainer for causal LMs: see train() for the loop.
class Trainer {
 public:
  // Builds the model and tokenizer from args.model (seeded by args.seed), the data through
  // `make_data` (default: make_data_loader_batch_source), the optimizer, scheduler and scaler from
  // the precision recipe. ValueError naming the option for arguments out of range.
  //
  // With a `communicator` of more than one rank it trains data-parallel as torch DDP: rank 0's
  // parameters broadcast at the start, each rank reading its shard of the batches (Note
  // [Data-parallel batches equal a single process's]), gradients averaged during the last
  // micro-batch's backward (Note [Gradient averaging during backward]), found_inf and the
  // stop request reduced over the ranks; rank 0 alone prints, logs, and writes metrics,
  // checkpoints and the model. The communicator's device must be the run's.
  explicit Trainer(TrainingConfig config, BatchSourceFactory make_data = {},
                   std::shared_ptr<Communicator> communicator = nullptr);
  // resolve_training_config(args), then as above.
  explicit Trainer(const TrainingArguments& args, BatchSourceFactory make_data = {},
                   std::shared_ptr<Communicator> communicator = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Resumes from args.resume_from_checkpoint when it is set, then trains to max_steps: each step
  // runs gradient_accumulation_steps micro-batches (loss / accumulation steps, as HF), unscales
  // and clips, steps the optimizer through the scaler, the scheduler, and zeroes the gradients;
  // then logs (logging_steps), evaluates (eval_strategy "steps"), saves (save_steps) and checks
  // for a stop request. At the end: the model and its tokenizer's files (save_tokenizer) in
  // output_dir, memory report, sample (optional: its failure is a warning and a stop request
  // skips it, the exit status unchanged). The loss curve is a callback's
  // (integrations/loss_plot_callback.h), as are the TensorBoard logs.
  // A fresh run (no resume_from_checkpoint) refuses an output_dir holding checkpoints unless
  // overwrite_output_dir (which deletes them), a resume refuses a checkpoint past max_steps, and
  // a failed write of metrics.jsonl stops the run (Error naming it).
  // Returns 0, or 128 + signal after a stop request (the checkpoint of that step saved).
  // Callbacks are told of the run's beginning, each step's end, each log entry and the run's end
  // (before the end-of-run steps above).
  int train();
  // HF's add_callback: called in the order added.
  void add_callback(std::shared_ptr<TrainerCallback> callback);

  // Mean loss and perplexity over the eval split (eval mode, no_grad, the run's autocast).
  // tokens == 0 when there is no eval split.
  EvalResult evaluate();

  // Writes output_dir/checkpoint-<global_step> (see train/checkpoint.h), the tokenizer's files
  // and checksums.json included, applies save_total_limit and removes the leftovers of killed
  // saves. Returns its path.
  std::string save_checkpoint();

  struct StepResult {
    double loss = 0.0;       // the sum over micro-batches of loss / accumulation steps
    double grad_norm = NAN;  // before clipping; NaN without clipping or on the meta device
    int64_t tokens = 0;      // predicted tokens in the step
  };
  // The FP8 training state (fp8 option), or null.
  Fp8Training* fp8() const { return fp8_.get(); }
  // One optimizer step of train(): gradient_accumulation_steps micro-batches forward and
  // backward, unscale, clip, the optimizer through the scaler, the scheduler, zero_grad. On the
  // meta device (a dry run, plan/) it allocates as a real step does and loss is NaN.
  // assume_overflow (dry runs): with loss scaling, the gradients count as holding inf, so the
  // optimizer step is skipped as after an overflow (GradScaler::record_overflow).
  StepResult step(bool assume_overflow = false);

  const TrainingArguments& args() const { return config_.args; }
  const TrainingConfig& config() const { return config_; }
  // Rank 0 of a data-parallel run, or a single process: the one that logs and writes files.
  bool is_main_process() const { return !communicator_ || communicator_->rank() == 0; }
  // ZeRO-1/2/3 over several ranks: each rank's optimizer holds its share (Note [ZeRO checkpoints]).
  bool sharded_optimizer() const { return communicator_ && config_.zero_stage >= 1; }
  // Seconds this run's ranks waited for gradient all-reduces after backward (0 on one process).
  double communication_wait_seconds() const;
  int64_t global_step() const { return global_step_; }
  int64_t max_steps() const { return max_steps_; }
  // Every entry logged so far (trainer_state.json's log_history; metrics.jsonl holds each but the
  // summary as a line): training entries {loss (mean over the logging interval of the per-step sums
  // of loss / accumulation steps), grad_norm (before clipping; null without clipping), lr (after
  // the step's scheduler update, as HF logs it), epoch, step, loss_scale, tokens_per_s,
  // peak_allocated_bytes, peak_reserved_bytes, and off the CPU host_peak_allocated_bytes,
  // host_peak_reserved_bytes (the host's allocator)}, eval entries {eval_loss, eval_perplexity,
  // eval_tokens, eval_runtime, epoch, step}, and a final {train_runtime, ...} summary.
  const nlohmann::ordered_json& log_history() const { return log_history_; }
  // Under ZeRO-3 the block parameters other ranks own have no memory between uses: read the
  // whole model inside a GatheredParameters (dist/zero_parameters.h) over zero_parameters().
  CausalLM& model() { return *model_; }
  // ZeRO-3's sharding of the blocks over the ranks, or null.
  ZeroParameterSharding* zero_parameters() const { return zero_parameters_.get(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  BatchSource& data() { return *data_; }
  Optimizer& optimizer() { return *optimizer_; }
  // Offload's host pool (Note [The host pool]) when this run offloads anything, else null.
  CachingAllocator* host_pool_in_use() const;
  const PrecisionRecipe& recipe() const { return config_.recipe; }
  // The breakdown of the run's peak, filled at the end of train().
  const MemoryBreakdown& memory_breakdown() const { return memory_; }
  // The sample printed at the end of train() (empty before, or with sample_max_new_tokens 0).
  const std::string& sample() const { return sample_; }

 private:
  // The trained model's files in `dir`: the adapter (use_peft) or the whole model, and the
  // tokenizer's.
  void save_model_files(const std::string& dir) const;
  // The run's pieces from config_: the model (assemble_model), data, optimizer
  // (assemble_optimizer), data parallel, schedule, counters.
  void build();
  // DDP's start (rank 0's parameters broadcast, the gradient reducer) and ZeRO-3's sharding.
  void start_data_parallel(const std::vector<NamedTensor>& trainable,
                           std::vector<int> gradient_owners);
  // max_steps from the data, the LR scheduler and the scaler.
  void start_schedule();
  // The step counters and logs of a fresh run; the parameters tagged for the memory report.
  void reset_run_state();
  // ZeRO-3: shards the blocks over the ranks, each trainable parameter by its optimizer owner.
  void shard_parameters(const std::vector<std::pair<std::string, Tensor>>& trainable,
                        const std::vector<int>& owners);
  void resume();
  void load_checkpoint(const std::string& dir);
  Tensor train_step(int64_t& tokens);
  void log_step(double loss, double grad_norm, double tokens_per_s);
  // Note [Scored tokens across accumulation]: fetches the step's micro-batches after `first`
  // into `ahead` and weighs each by its share of the step's scored targets (with
  // average_tokens_across_devices, of every rank's, times the ranks for DDP's mean).
  void weigh_micro_batches(const TokenBatch& first, std::vector<TokenBatch>& ahead,
                           std::vector<double>& weights);
  EvalResult log_eval();  // the result logged (tokens 0: no eval split)
  void append_metrics(const nlohmann::ordered_json& entry);
  // A log line, around the progress bar while there is one.
  void print_log_line(const std::string& line);
  // Refuses (or, with overwrite_output_dir, deletes) another run's checkpoints in a fresh run's
  // output_dir, and removes the leftovers of killed saves and rotations.
  void prepare_output_dir();
  void remove_leftovers();
  // The end-of-run steps that are not results: `run`'s errors are warnings, and a pending stop
  // request skips it.
  void optional_end_step(const char* what, const std::function<void()>& run);
  void print_sample();
  nlohmann::ordered_json trainer_state() const;
  double epoch() const;
  void finish_run(bool stopped);

  TrainingConfig config_;
  const TrainingArguments& args_ = config_.args;  // the options as given (config_.args)
  BatchSourceFactory make_data_;
  int64_t window_ = 0;
  std::unique_ptr<CausalLM> model_;
  std::optional<LoraConfig> lora_;  // set with use_peft: the model carries these adapters
  // With use_peft, on rank 0: the base the adapters train on, saved beside them (Note [The base
  // of an adapter]) and compared with a resumed checkpoint's.
  std::optional<AdapterBase> adapter_base_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<BatchSource> data_;
  std::unique_ptr<Optimizer> optimizer_;
  // What clip_grad_norm_ folds, in the model's order (HF Trainer clips model.parameters()): the
  // optimizer's tensors, without ZeRO (whose optimizer clips its shares in that order).
  std::vector<Tensor> clip_params_;
  // Under autocast: the positions in model_->parameters() of the weights the last forward cast,
  // which the next forward casts together at its start (ops/autocast.h: prefetch_autocast_casts).
  std::vector<size_t> autocast_weights_;
  std::unique_ptr<LRScheduler> scheduler_;
  std::unique_ptr<GradScaler> scaler_;
  std::unique_ptr<Fp8Training> fp8_;  // with fp8: the FP8 layers' scales and weight copies
  std::pair<int64_t, int64_t> fp8_counts_{0, 0};  // the last step's FP8 overflows, underflows
  std::shared_ptr<Communicator> communicator_;    // data-parallel runs only
  std::unique_ptr<GradientReducer> reducer_;
  std::shared_ptr<ZeroParameterSharding> zero_parameters_;  // ZeRO-3 only
  OffloadSettings offload_;
  OffloadedOptimizer* offloaded_optimizer_ = nullptr;  // optimizer_ itself when it offloads

  int64_t global_step_ = 0;
  int64_t max_steps_ = 0;
  int64_t steps_per_epoch_ = 1;
  nlohmann::ordered_json log_history_ = nlohmann::ordered_json::array();
  // The logging interval's running sums (saved in checkpoints, so a resumed run logs the same).
  double interval_loss_ = 0.0;
  int64_t interval_steps_ = 0;
  int64_t interval_tokens_ = 0;
  double interval_seconds_ = 0.0;
  int64_t total_tokens_ = 0;
  int64_t last_saved_step_ = -1;
  MemoryBreakdown memory_;
  std::string sample_;
  ProgressBar* progress_ = nullptr;  // while train() runs: log lines go around the bar
  std::vector<std::shared_ptr<TrainerCallback>> callbacks_;
};

}  // namespace headroom

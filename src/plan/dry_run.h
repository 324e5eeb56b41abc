// The planner's measurement: the Trainer's own training step run on the meta device, so the
// predicted peak is the allocation trace of the code a real run executes (DESIGN.md principle 2).
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "nn/model_config.h"
#include "memory/memory_category.h"
#include "memory/slack_report.h"
#include "plan/analytic_memory.h"
#include "plan/step_kernels.h"
#include "train/training_arguments.h"

namespace headroom {

struct DryRunOptions {
  // Full training steps (forward, backward, optimizer); the second counts the optimizer states
  // the first creates lazily.
  int steps = 2;
  // Also one evaluation batch of per_device_eval_batch_size after the steps, when
  // args.eval_strategy is "steps" (a real run's eval happens between steps).
  bool include_eval = true;
  // At most this many micro-batches per step (0: gradient_accumulation_steps). From the second
  // micro-batch on, each repeats the allocations of the one before (the gradients exist), so
  // two give the peak of any accumulation (the grid test checks that against real runs of 2 and
  // 4), and a plan's time does not grow with gradient_accumulation_steps.
  int64_t max_micro_batches = 2;
  // With loss scaling, also dry-run a first step that overflows and report the larger peaks
  // (Note [Planning loss-scaled runs]).
  bool cover_first_step_overflow = true;
  // Data parallel: rank `rank` of `world_size` ranks, with args' ZeRO stage (its share of the
  // states and gradients, its shard of the batches), through a MetaCommunicator (Note [A dry
  // run's collectives]). 1: one process.
  int world_size = 1;
  int rank = 0;
  // The device's capacity for the allocator (a card's memory less its overhead), as a real run
  // on that card has it: a request that does not fit frees the cached blocks and is retried
  // (PyTorch's policy), and one that still does not fit is an OutOfMemoryError. 0: unbounded.
  int64_t memory_limit = 0;
};

// Note [Planning loss-scaled runs]
// With dynamic loss scaling (fp16), whether a step overflows depends on the values, which the
// meta device does not have; an overflowing step skips the optimizer, so the lazily created
// optimizer states then appear a step later, and the allocator's cache (reserved bytes) evolves
// differently. The first steps are the ones that overflow in practice (the scale starts at
// 2^16 and backs off), so the dry run is done twice: no step skipped, and the first step skipped
// (then the usual steps). The plan reports the larger peaks; a real run gives one of the two
// (later overflows only leave out an optimizer step's temporaries).

struct DryRunResult {
  Device target;                     // the device the plan is for (args.device resolved)
  int64_t peak_allocated_bytes = 0;  // allocated_bytes.all.peak over the steps
  int64_t peak_reserved_bytes = 0;   // reserved_bytes.all.peak
  // Bytes per category at the moment of the allocated peak; they add up to it exactly.
  CategoryBytes at_peak{};
  int64_t allocator_slack = 0;  // peak_reserved_bytes - peak_allocated_bytes
  // The meta allocator's state at the reserved peak (Note [Slack report]).
  ReservedPeakState at_reserved_peak;
  // Peaks while the model is built (initialised or loaded, converted to the recipe's dtype),
  // before training starts; a real run's metrics count from after it, but the device must
  // hold it too.
  int64_t load_peak_allocated_bytes = 0;
  int64_t load_peak_reserved_bytes = 0;
  struct Peaks {
    int64_t allocated = 0, reserved = 0;
    nlohmann::ordered_json to_json() const;
  };
  bool loss_scaling = false;
  Peaks no_overflow_peaks;         // the dry run without skipped steps
  Peaks first_step_skipped_peaks;  // with loss scaling: the run whose first step overflowed
  // Offload's host pool (Note [The host pool]; 0 without offload): its peaks from the start of
  // training, as metrics.jsonl's host_peak_*_bytes count them, and while the model is built.
  int64_t host_peak_allocated_bytes = 0;
  int64_t host_peak_reserved_bytes = 0;
  int64_t host_load_peak_reserved_bytes = 0;
  // Bytes allocated in the host pool per step after the first (each a copy out of the device:
  // gradients, saved activations), which the step-time estimate charges twice (out and back).
  int64_t host_bytes_per_step = 0;
  int64_t num_parameters = 0;   // a 4-bit base's weights included (Module's count has none)
  int64_t parameter_bytes = 0;  // bytes of the parameters in the recipe's dtype and of the
                                // 4-bit weights with their quantization state
  int64_t tokens_per_step = 0;  // batch x accumulation x max_seq_length
  // Requests retried after freeing the cache (num_alloc_retries) during training, each a device
  // synchronisation; only a memory_limit makes any.
  int64_t alloc_retries = 0;
  // With rows as the data (Note [Planning rows]): the batch planned and where it comes from,
  // e.g. "[4, 183]: the 4 longest rows of sft.jsonl, padded"; empty otherwise.
  std::string data_batch;
  std::string recipe;                // the precision recipe's name
  bool expandable_segments = false;  // the allocator policy dry-run (Note [Expandable segments])
  HfConfig config;                   // the model's
  int steps = 0;                     // optimizer steps dry-run
  int world_size = 1;                // data parallel: the ranks, and the one dry-run
  int rank = 0;
  int64_t zero_stage = 0;
  // The guides' formulas for the same configuration (Note [Formula memory]), for comparison;
  // with ZeRO, per rank (optimizer states over world_size from stage 1, gradients from stage 2).
  FormulaMemory formula;
  double seconds = 0.0;  // wall time of the dry run
  // The kernel census of the last step (plan/step_kernels.h): what it launches on the device.
  StepCensus step_census;

  // What the device must hold: the larger of the training and the load peaks.
  int64_t required_bytes() const;
  // What the host pool must hold, likewise (0 without offload).
  int64_t host_required_bytes() const;

  // {"device", "peak_allocated_bytes", "peak_reserved_bytes", "breakdown": {parameters,
  //  gradients, optimizer_states, activations, temporaries, allocator_slack},
  //  "load_peak_allocated_bytes", "load_peak_reserved_bytes", "num_parameters", ...,
  //  "formula": FormulaMemory::to_json()}.
  nlohmann::ordered_json to_json() const;
};

// The device a plan is for: `device` (TrainingArguments.device) with "auto" resolved as a run
// would (auto_device: the CPU unless a GPU's backend computes the ops). ValueError for meta,
// which no run trains on.
Device planned_device(const std::string& device);

// Builds the model of args.model on meta (a preset or a config.json directory; weights are
// never read), with the recipe, optimizer and checkpointing policy of `args`, synthetic
// batches of per_device_train_batch_size x max_seq_length, and runs `options.steps` steps of
// the Trainer on the meta device's CachingAllocator (the policy of every device, configured by
// HEADROOM_ALLOC_CONF as the real run would be). args.device names the device planned for
// (auto: the CPU when no GPU is present); every op allocates the same bytes on every device
// (Note [Kernel tables] in backend/kernel_table.h), so one dry run stands for any of them.
// args.data and output_dir are not used.
// The meta allocator's cache is emptied and its peaks reset first; meta tensors alive in the
// process would count, so none should be.
DryRunResult dry_run_training(const TrainingArguments& args, const DryRunOptions& options = {});

}  // namespace headroom

// `headroom plan --gpu-memory SIZE` / `--gpu NAME`: which configurations of the user's model fit,
// best first. Every candidate is dry-run, so "fits" is the dry run's figure plus the CUDA
// overhead, not a formula; the order is the step-time estimate (Note [Step time estimate]).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/training_plan.h"

namespace headroom {

struct SearchSpace {
  // Empty lists mean all: every precision recipe the GPU supports (bf16 ones only where it has
  // bf16), every optimizer family, and none / selective / every_2 / full checkpointing.
  std::vector<std::string> precisions;
  std::vector<std::string> optims;
  std::vector<std::string> policies;
  // What trains: "full" (every weight) or LoRA as "lora:R" (the architecture's default targets)
  // or "lora:R:all-linear", and QLoRA ("qlora:R[:TARGETS]": the same on a frozen 4-bit base,
  // NF4 with double quantization, unless the base arguments set load_in_4bit's options). Empty:
  // full, lora:16, lora:16:all-linear, qlora:16 and qlora:16:all-linear; when the base
  // arguments already ask for LoRA (use_peft), that adapter only.
  std::vector<std::string> adapters = {};
  // The allocator policies, in the order tried: "native" (a cached segment per request size)
  // and "expandable_segments" (Note [Expandable segments]). A configuration is dry-run with
  // the first; the next is tried only when it does not fit, since the allocator changes what
  // is reserved and not the step time. Empty: native, then expandable_segments; with
  // --expandable_segments (or HEADROOM_ALLOC_CONF=expandable_segments:True) expandable only.
  std::vector<std::string> allocators = {};
  // ZeRO stages for a target of several ranks (PlanTarget::world_size), in the order tried, the
  // next only for a configuration the one before does not fit (DDP communicates least; ZeRO-1
  // adds the parameters' broadcast, ZeRO-3 a gather per block). Empty: 0, 1, 2, 3 (the base
  // arguments' zero_stage alone when they set one); one process: none.
  std::vector<int64_t> zero_stages = {};
};

// One entry of SearchSpace::adapters applied to `args` (use_peft, lora_r, lora_target_modules,
// load_in_4bit); ValueError naming the entry when it is not full / (q)lora:R[:TARGETS], R > 0.
void apply_adapter_choice(TrainingArguments& args, const std::string& choice);

// Note [Configuration search]
// The effective batch (per_device_train_batch_size x gradient_accumulation_steps of the base
// arguments) stays fixed; micro-batch x accumulation runs over its splits with the micro-batch
// a divisor of it. For each precision x optimizer x policy the micro-batches are tried from the
// smallest up and the first that does not fit ends that row, since memory grows with the
// micro-batch; of the splits that fit, the row keeps the fastest by estimate. LOMO keeps no
// gradients to accumulate: only micro-batch = effective batch; it has no fp16 recipe. pure_bf16
// already keeps AdamW's states in bf16, so adamw_bf16 adds nothing to it and is skipped there;
// pure_bf16+kahan is searched with adamw_torch only, the one optimizer with a Kahan update (Note
// [Precision recipes]). LoRA rows search AdamW (adamw_torch) only: the adapters' states are a few
// MB, so another optimizer changes next to nothing. Each dry run does 2 steps of at most 2
// micro-batches (DryRunOptions). A split that does not fit with the native allocator is dry-run
// again with expandable segments before it ends its row (SearchSpace::allocators); the table says
// which the configuration needs. A full fine-tune (not LOMO) that fits with neither is dry-run
// again with optimizer offload, then with optimizer and activation offload (Note [Optimizer
// offload], Note [Activation offload]); the table gives the host RAM it needs and the step estimate
// charges the host traffic. With several ranks each split is tried at ZeRO stage 0, then 1, 2 and
// 3, each with the allocators in turn, and the first that fits is kept (SearchSpace::zero_stages);
// a ZeRO plan is its heaviest rank's (Note [Planning data-parallel ranks]); offload comes after
// every stage (ZeRO-Offload: each rank offloads its share's optimizer), its host RAM given per
// rank.

// Note [Configurations that need ZeRO-3]
// Stages 0 to 2 leave every rank holding all the parameters. When no configuration of an adapter
// choice fits at the stages tried, the search says so per adapter, with the closest; when stage 3
// was not among them (--search-zero-stages) and even the closest one's parameters at its peak
// (the dry run's figure) fill the GPU, it says that only ZeRO-3 could fit it.
struct SearchResult {
  int64_t effective_batch = 0;
  // One per precision x optimizer x policy that fits at some split (its fastest split), best
  // first: estimated step time, then required bytes.
  std::vector<TrainingPlan> fitting;
  int64_t dry_runs = 0;
  int64_t rejected = 0;                 // dry-run configurations that did not fit
  std::optional<TrainingPlan> closest;  // of those, the one needing least
  // Combinations the engine refuses (an error from building or stepping them), with the reason;
  // the precision x optimizer is skipped at its first refusal.
  std::vector<std::string> unsupported;
  // Per adapter choice that nothing fits, with several ranks (Note [Configurations that need
  // ZeRO-3]).
  std::vector<std::string> notes;
  int world_size = 1;
  double seconds = 0.0;

  nlohmann::ordered_json to_json(int64_t max_rows) const;
  // A table of the first `max_rows` fitting configurations.
  std::string format(int64_t max_rows) const;
};

// Searches around `base` (its model, sequence length, effective batch and other options) for
// `target`, which must have a capacity. `progress` is called after each dry run (may be empty).
SearchResult search_configurations(const TrainingArguments& base, const PlanTarget& target,
                                   const SearchSpace& space,
                                   const std::function<void(int64_t dry_runs)>& progress = {});

}  // namespace headroom

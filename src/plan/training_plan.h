// What `headroom plan` says about one configuration: the dry run's figures, the CUDA overhead
// that no allocator sees, whether it fits the memory named, and the guides' formula beside it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "plan/dry_run.h"
#include "plan/step_kernels.h"
#include "plan/gpu_specs.h"
#include "plan/step_cost.h"
#include "train/training_arguments.h"

namespace headroom {

// The device a plan is for and how much memory it has.
struct PlanTarget {
  Device device = kCPU;
  std::optional<GpuSpec> gpu;   // --gpu: a known card (its memory, family and rates)
  int64_t capacity_bytes = 0;   // the memory to fit in; 0: none given, nothing to check
  int64_t overhead_bytes = 0;   // CUDA context + workspaces (Note [CUDA overhead per GPU family])
  std::string overhead_source;  // e.g. "hopper family constant"; empty on the CPU
  int world_size = 1;           // --world_size: data-parallel ranks, one such device each

  // The GPU whose rates estimate step times: --gpu's, else the H100 (the GPUs headroom targets).
  const GpuSpec& rates() const;
  // "H100-80GB (cuda:0)", "24.00 GiB GPU (cuda:0)", "cpu"; "8 x H100-80GB (cuda:0)" for ranks.
  std::string description() const;
};

// --gpu NAME and --gpu-memory SIZE make a CUDA target (SIZE overrides the card's memory);
// otherwise `device` ("auto": cuda when a GPU is present, else the CPU) with no capacity.
// ValueError naming the option for an unknown GPU, a bad size or a device that cannot be
// planned for (meta).
PlanTarget plan_target(const std::string& device, const std::string& gpu,
                       const std::string& gpu_memory);

// Note [Planning data-parallel ranks]
// ZeRO's shares are whole parameters, so its ranks hold different bytes: each rank is dry-run
// as itself (DryRunOptions::rank) and the plan is the heaviest rank's (the one needing most,
// then the one allocating most), the others' peaks listed beside it. A rank that does not fit
// ends the loop, as the configuration cannot fit whatever the others need. Under DDP (stage 0)
// every rank makes the same allocations (the same buckets, batches of one shape), so rank 0 stands
// for all.
struct RankPeaks {
  int rank = 0;
  int64_t peak_allocated = 0, peak_reserved = 0, required = 0;
};

struct TrainingPlan {
  TrainingArguments args;
  DryRunResult
      dry;  // of one process, or of the heaviest rank (Note [Planning data-parallel ranks])
  std::vector<RankPeaks> ranks;  // the ranks dry-run, with target.world_size > 1
  PlanTarget target;
  // What the device must hold: the larger of the training and load peaks (reserved) plus the
  // CUDA overhead.
  int64_t required_bytes = 0;
  std::optional<StepCost> cost;  // for CUDA targets
  // When the slack exceeds 10% with the native allocator: the same configuration dry-run with
  // expandable segments, to show what the fix gives (see plan_with_expandable_segments).
  std::optional<DryRunResult::Peaks> with_expandable_segments;
  // With --fp8: the same configuration dry-run without FP8 (bf16 autocast when the run's own
  // recipe is fp32), to show what FP8 saves or costs (see plan_against_without_fp8).
  std::optional<DryRunResult> without_fp8;
  TrainingArguments without_fp8_args;
  // Note [Planning under the card's capacity]: when the unbounded dry run reserves more than the
  // card holds but allocates less, the run under the card's capacity: the reserved peak the
  // unbounded one had, and whether the capped run ran out of memory all the same. `dry` then
  // holds the capped run (its alloc_retries, each a device synchronisation).
  std::optional<int64_t> unbounded_peak_reserved;
  bool out_of_memory_under_capacity = false;

  bool fits() const {
    return target.capacity_bytes == 0 || required_bytes <= target.capacity_bytes;
  }
  // DryRunResult::to_json() plus "target", "cuda_overhead_bytes", "required_bytes",
  // "capacity_bytes", "fits" and "step_time_estimate".
  nlohmann::ordered_json to_json() const;
  // The dry run's kernel census with its roofline on target.rates() (`plan --kernels`).
  StepKernels kernels() const;
  // The report: the configuration, the dry run beside the formula per category, the overhead,
  // what is required and whether it fits.
  std::string format() const;
};

// Dry-runs `args` for `target` (DryRunOptions as given; the meta device allocates as the target
// does, see dry_run_training) and completes the plan.
TrainingPlan plan_training(const TrainingArguments& args, const PlanTarget& target,
                           const DryRunOptions& options = {});

// Fills plan.with_expandable_segments by a second dry run when the plan's slack exceeds 10% of
// its reserved peak with the native allocator (Note [Slack report]); otherwise does nothing.
void plan_with_expandable_segments(TrainingPlan& plan, const DryRunOptions& options = {});

// With --fp8, fills plan.without_fp8 by a second dry run of the same configuration without FP8,
// in bf16 autocast when the run's recipe is fp32 (FP8's usual company), else in its recipe;
// without --fp8 does nothing.
void plan_against_without_fp8(TrainingPlan& plan, const DryRunOptions& options = {});

// "gpt2, bf16, adamw_torch, checkpointing selective, 8 x 2 x 1024 tokens": the options that make
// a configuration, for reports and the search table.
std::string describe_configuration(const TrainingArguments& args);
// "optimizer + activations", "optimizer 0.5": what `args` offloads; "" for nothing.
std::string offload_label(const TrainingArguments& args);

}  // namespace headroom

// The dry run: a Trainer on the meta device with synthetic batches, stepped as train() steps.
#include "plan/dry_run.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/kernel_census.h"
#include "data/sft_dataset.h"
#include "dist/meta_communicator.h"
#include "memory/device_memory.h"
#include "memory/host_pool.h"
#include "nn/linear_4bit.h"
#include "plan/synthetic_batches.h"
#include "train/data_loader_batch_source.h"
#include "train/memory_report.h"
#include "train/model_source.h"
#include "train/trainer.h"

namespace headroom {

Device planned_device(const std::string& device) {
  const Device target = resolve_device(device);
  if (target.is_meta()) {
    throw ValueError(
        "device: 'meta' cannot be planned for; name the device of the real run "
        "(cpu or cuda)");
  }
  return target;
}

nlohmann::ordered_json DryRunResult::Peaks::to_json() const {
  return {{"peak_allocated_bytes", allocated}, {"peak_reserved_bytes", reserved}};
}

int64_t DryRunResult::required_bytes() const {
  return std::max(peak_reserved_bytes, load_peak_reserved_bytes);
}

int64_t DryRunResult::host_required_bytes() const {
  return std::max(host_peak_reserved_bytes, host_load_peak_reserved_bytes);
}

nlohmann::ordered_json DryRunResult::to_json() const {
  MemoryBreakdown b;
  b.at_peak = at_peak;
  b.allocator_slack = allocator_slack;
  return {
      {"device", target.str()},
      {"peak_allocated_bytes", peak_allocated_bytes},
      {"peak_reserved_bytes", peak_reserved_bytes},
      {"breakdown", b.breakdown_json()},
      {"load_peak_allocated_bytes", load_peak_allocated_bytes},
      {"load_peak_reserved_bytes", load_peak_reserved_bytes},
      {"host_peak_allocated_bytes", host_peak_allocated_bytes},
      {"host_peak_reserved_bytes", host_peak_reserved_bytes},
      {"host_required_bytes", host_required_bytes()},
      {"host_bytes_per_step", host_bytes_per_step},
      {"num_parameters", num_parameters},
      {"parameter_bytes", parameter_bytes},
      {"tokens_per_step", tokens_per_step},
      {"alloc_retries", alloc_retries},
      {"data_batch",
       data_batch.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(data_batch)},
      {"world_size", world_size},
      {"rank", rank},
      {"zero_stage", zero_stage},
      {"precision", recipe},
      {"expandable_segments", expandable_segments},
      {"loss_scaling_variants",
       loss_scaling && first_step_skipped_peaks.reserved > 0
           ? nlohmann::ordered_json{{"no_overflow", no_overflow_peaks.to_json()},
                                    {"first_step_skipped", first_step_skipped_peaks.to_json()}}
           : nlohmann::ordered_json()},
      {"slack",
       {{"exceeds_threshold", slack_exceeds_threshold(peak_allocated_bytes, peak_reserved_bytes)},
        {"at_reserved_peak", at_reserved_peak.to_json()}}},
      {"dry_run_seconds", seconds},
      {"formula", formula.to_json()}};
}

DryRunResult dry_run_training(const TrainingArguments& args, const DryRunOptions& options) {
  if (options.steps < 1) throw ValueError(str_cat("dry run: steps ", options.steps, " is below 1"));
  if (options.world_size < 1) {
    throw ValueError(str_cat("world_size: ", options.world_size, " is below 1"));
  }
  const auto start = std::chrono::steady_clock::now();
  DryRunResult result;
  result.target = planned_device(args.device);
  TrainingArguments dry = args;
  dry.device = "meta";
  if (options.max_micro_batches > 0) {
    dry.gradient_accumulation_steps =
        std::min(dry.gradient_accumulation_steps, options.max_micro_batches);
  }
  dry.resume_from_checkpoint.clear();
  dry.sample_max_new_tokens = 0;
  const TrainingConfig config = resolve_training_config(dry);
  const bool eval = options.include_eval && config.eval_strategy == IntervalStrategy::steps;
  int64_t prefetched = 0;
  if (result.target.is_cpu() && args.dataloader_num_workers > 0) {
    prefetched = args.dataloader_num_workers * args.dataloader_prefetch_factor.value_or(2);
  }
  int64_t seq_length = 0;
  int64_t rows = args.per_device_train_batch_size;
  auto batches = [&](const TrainingArguments& a, const Tokenizer& tokenizer, int64_t window,
                     Device) {
    seq_length = window - 1;
    SyntheticBatchOptions synthetic{.batch_size = a.per_device_train_batch_size,
                                    .seq_length = window - 1,
                                    .prefetched = prefetched,
                                    // One per rank: each rank evaluates its share
                                    // (Trainer::evaluate).
                                    .eval_batches = eval ? options.world_size : 0,
                                    .host_is_device = result.target.is_cpu(),
                                    .pinned = a.dataloader_pin_memory};
    // Text makes [batch, max_seq_length] windows whatever it holds, so a text path is not read
    // (it need not exist); rows are.
    const std::string extension = std::filesystem::path(a.data).extension().string();
    const bool maybe_rows =
        std::filesystem::exists(a.data) || extension == ".jsonl" || extension == ".json";
    if (!a.data.empty() && maybe_rows && is_row_data(a.data, a.output_dir)) {
      // Note [Planning rows]
      // Rows make batches of many shapes; the plan takes the largest a batch can be: the
      // per_device_train_batch_size longest examples (or packed rows), padded to the longest or
      // flattened, with their sequence starts. A run's peak is at its largest batch, so this
      // bounds every order the shuffle can draw, and equals the run's when its batches are alike.
      const SftExampleSets sets = make_sft_example_sets(a, tokenizer, window);
      const TokenBatch largest =
          sets.train->collate(sets.train->longest_samples(a.per_device_train_batch_size));
      synthetic.rows = rows = largest.input_ids.size(0);
      synthetic.seq_length = seq_length = largest.input_ids.size(1);
      synthetic.cu_seqlens = largest.cu_seqlens;
      synthetic.varying_targets = true;
      result.data_batch =
          str_cat("[", synthetic.rows, ", ", synthetic.seq_length, "]: the ",
                  largest.cu_seqlens.empty() ? synthetic.rows : largest.cu_seqlens.size() - 1,
                  sets.train->padding_free() ? " longest sequences of " : " longest rows of ",
                  a.data, sets.train->padding_free() ? ", flattened" : ", padded");
      if (sets.eval) {
        const TokenBatch eval_largest =
            sets.eval->collate(sets.eval->longest_samples(a.per_device_eval_batch_size));
        synthetic.eval_rows = eval_largest.input_ids.size(0);
        synthetic.eval_seq_length = eval_largest.input_ids.size(1);
        synthetic.eval_cu_seqlens = eval_largest.cu_seqlens;
      } else {
        synthetic.eval_batches = 0;
      }
    }
    return std::make_unique<SyntheticBatchSource>(synthetic);
  };
  // Rank `rank`'s collectives (Note [A dry run's collectives]); none for one process.
  std::shared_ptr<Communicator> communicator;
  if (options.world_size > 1) {
    communicator = std::make_shared<MetaCommunicator>(options.rank, options.world_size);
  }

  // One dry run of the steps, the first `skipped` of them overflowing (loss scaling only).
  // A fresh meta allocator as a fresh process has: nothing cached, no cap (the plan must see
  // the whole peak, whatever the device holds).
  CachingAllocator& meta = caching_allocator(kMeta);
  // The allocator policy of the run planned: expandable segments from --expandable_segments or
  // HEADROOM_ALLOC_CONF (PYTORCH_CUDA_ALLOC_CONF), restored afterwards for the next plan.
  const bool expandable_before = meta.config().expandable_segments;
  const bool expandable =
      args.expandable_segments || AllocatorConfig::from_env().expandable_segments;
  struct RestoreExpandable {
    CachingAllocator& allocator;
    bool enabled;
    ~RestoreExpandable() {
      allocator.empty_cache();
      allocator.set_expandable_segments(enabled);
      allocator.set_memory_limit(0);
    }
  } restore{meta, expandable_before};
  // Offload's host pool of a dry run (Note [The host pool]): meta too, but its own.
  CachingAllocator& host = host_pool(kMeta);
  auto host_peaks = [&host] {
    const DeviceStats stats = host.stats();
    const auto all = static_cast<size_t>(StatType::all);
    return std::pair(stats.allocated_bytes[all].peak, stats.reserved_bytes[all].peak);
  };
  auto run = [&](int skipped) {
    meta.empty_cache();
    meta.set_expandable_segments(expandable);
    meta.set_memory_limit(static_cast<size_t>(options.memory_limit));
    meta.reset_peak_stats();
    host.empty_cache();
    // HEADROOM_ALLOC_CONF configures the host pool as every allocator; --expandable_segments is
    // the device's.
    host.set_expandable_segments(AllocatorConfig::from_env().expandable_segments);
    host.reset_peak_stats();
    Trainer trainer(config, batches, communicator);
    result.load_peak_allocated_bytes = static_cast<int64_t>(max_memory_allocated(kMeta));
    result.load_peak_reserved_bytes = static_cast<int64_t>(max_memory_reserved(kMeta));
    result.host_load_peak_reserved_bytes =
        std::max(result.host_load_peak_reserved_bytes, host_peaks().second);
    // From here on as Trainer::train(): its peaks (metrics.jsonl) count from this reset.
    meta.reset_peak_stats();
    const int64_t retries_before = meta.stats().num_alloc_retries;
    host.reset_peak_stats();
    auto host_allocated_so_far = [&host] {
      return host.stats().allocated_bytes[static_cast<size_t>(StatType::all)].allocated;
    };
    int64_t host_after_first = 0;
    for (int i = 0; i < skipped + options.steps; ++i) {
      // The kernel census of the last step (Note [Step roofline]): the optimizer's states exist.
      KernelCensus census;
      std::optional<KernelCensusScope> counting;
      const bool last = skipped == 0 && i == options.steps - 1;
      if (last) counting.emplace(census);
      trainer.step(/*assume_overflow=*/i < skipped);
      if (i == 0) host_after_first = host_allocated_so_far();
      if (last) {
        counting.reset();
        result.step_census = StepCensus::of(census, args.gradient_accumulation_steps);
      }
    }
    if (skipped == 0 && options.steps > 1) {
      result.host_bytes_per_step =
          (host_allocated_so_far() - host_after_first) / (options.steps - 1);
    }
    if (eval) trainer.evaluate();
    if (skipped == 0) result.alloc_retries = meta.stats().num_alloc_retries - retries_before;
    const auto [host_allocated, host_reserved] = host_peaks();
    result.host_peak_allocated_bytes = std::max(result.host_peak_allocated_bytes, host_allocated);
    result.host_peak_reserved_bytes = std::max(result.host_peak_reserved_bytes, host_reserved);
    const MemoryBreakdown b = MemoryBreakdown::of_device(kMeta);
    if (skipped == 0) {
      result.num_parameters = trainer.model().num_parameters();
      std::vector<Shape> shapes, trainable;
      for (const Tensor& p : trainer.model().parameters()) {
        result.parameter_bytes += static_cast<int64_t>(p.nbytes());
        shapes.push_back(p.shape());
        if (p.requires_grad()) trainable.push_back(p.shape());
      }
      // A 4-bit base's weights are buffers, not parameters, but the model still multiplies by
      // them: they count as parameters (for the FLOPs of the step estimate) and as weight bytes.
      int64_t bytes_4bit = 0;
      for (const Quant4bitWeight* w : weights_4bit(trainer.model())) {
        result.num_parameters += w->numel();
        bytes_4bit += w->nbytes();
      }
      result.parameter_bytes += bytes_4bit;
      result.recipe = trainer.recipe().name();
      result.config = trainer.model().config();
      result.loss_scaling = trainer.recipe().loss_scaling;
      result.formula = formula_training_memory(trainer.model().config(), config, shapes,
                                               config.lora ? &trainable : nullptr);
      // The packed weights and their block statistics, as bitsandbytes lays them out.
      result.formula.parameters += bytes_4bit;
      result.zero_stage = options.world_size > 1 ? config.zero_stage : 0;
      // ZeRO per rank: stage 1 shards the optimizer states over the ranks, stage 2 the gradients,
      // stage 3 the weights (the blocks'; the formula counts them all as the paper's).
      FormulaMemory& f = result.formula;
      if (result.zero_stage >= 1) {
        f.optimizer_states /= options.world_size;
        f.optimizer_bytes_per_parameter /= options.world_size;
      }
      if (result.zero_stage >= 2) {
        f.gradients /= options.world_size;
        f.gradient_bytes_per_parameter /= options.world_size;
      }
      if (result.zero_stage >= 3) {
        f.parameters /= options.world_size;
        f.weight_bytes_per_parameter /= options.world_size;
      }
    }
    return b;
  };
  const MemoryBreakdown clean = run(0);
  MemoryBreakdown b = clean;
  result.no_overflow_peaks = {clean.peak_allocated, clean.peak_reserved};
  if (result.loss_scaling && options.cover_first_step_overflow) {
    // Note [Planning loss-scaled runs]
    const MemoryBreakdown skipped = run(1);
    result.first_step_skipped_peaks = {skipped.peak_allocated, skipped.peak_reserved};
    if (std::pair(skipped.peak_allocated, skipped.peak_reserved) >
        std::pair(clean.peak_allocated, clean.peak_reserved)) {
      b = skipped;
    }
    b.peak_reserved = std::max(clean.peak_reserved, skipped.peak_reserved);
    b.at_reserved_peak = skipped.peak_reserved > clean.peak_reserved ? skipped.at_reserved_peak
                                                                     : clean.at_reserved_peak;
    b.allocator_slack = b.peak_reserved - b.peak_allocated;
  }
  meta.empty_cache();
  host.empty_cache();
  result.peak_allocated_bytes = b.peak_allocated;
  result.peak_reserved_bytes = b.peak_reserved;
  result.at_peak = b.at_peak;
  result.allocator_slack = b.allocator_slack;
  result.at_reserved_peak = b.at_reserved_peak;
  result.steps = options.steps;
  result.world_size = options.world_size;
  result.rank = options.rank;
  result.expandable_segments = expandable;
  result.tokens_per_step = rows * args.gradient_accumulation_steps * seq_length;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace headroom

// One configuration's plan: target, dry run, overhead, fit, formula comparison.
#include "plan/training_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/error.h"
#include "memory/alloc_config.h"
#include "train/trainer.h"
#include "train/progress.h"
#include "train/trainer.h"

namespace headroom {

const GpuSpec& PlanTarget::rates() const { return gpu ? *gpu : find_gpu_spec("H100-80GB"); }

std::string PlanTarget::description() const {
  const std::string ranks = world_size > 1 ? str_cat(world_size, " x ") : std::string();
  if (gpu) return str_cat(ranks, gpu->name, " (", device.str(), ")");
  if (capacity_bytes > 0) {
    return str_cat(ranks, format_bytes(capacity_bytes), " GPU (", device.str(), ")");
  }
  return ranks + device.str();
}

PlanTarget plan_target(const std::string& device, const std::string& gpu,
                       const std::string& gpu_memory) {
  PlanTarget target;
  if (!gpu.empty() || !gpu_memory.empty()) {
    target.device = Device{DeviceType::cuda, 0};
    if (device != "auto") {
      const Device named = Device::parse(device);
      if (!named.is_cuda()) {
        throw ValueError(str_cat("device: '", device,
                                 "' with --gpu / --gpu-memory, which plan "
                                 "for a GPU (use cuda, cuda:N or leave device out)"));
      }
      target.device = named;
    }
    GpuFamily family = default_gpu_family();
    if (!gpu.empty()) {
      target.gpu = find_gpu_spec(gpu);
      family = target.gpu->family;
      target.capacity_bytes = target.gpu->memory_bytes;
    }
    if (!gpu_memory.empty()) {
      target.capacity_bytes = static_cast<int64_t>(parse_byte_size(gpu_memory, "gpu_memory"));
      if (target.capacity_bytes <= 0) {
        throw ValueError(str_cat("gpu_memory: '", gpu_memory, "' is not a positive size"));
      }
    }
    target.overhead_bytes = family.overhead_bytes();
    target.overhead_source = str_cat(family.name, " family constant");
    return target;
  }
  target.device = planned_device(device);
  if (target.device.is_cuda()) {
    target.overhead_bytes = default_gpu_family().overhead_bytes();
    target.overhead_source = str_cat(default_gpu_family().name, " family constant");
  }
  return target;
}

std::string offload_label(const TrainingArguments& args) {
  const OffloadSettings o = resolve_training_config(args).offload;
  std::string label;
  auto add = [&label](const std::string& part) { label += (label.empty() ? "" : " + ") + part; };
  if (o.optimizer) {
    add(o.optimizer_ratio < 1.0 ? str_cat("optimizer ", o.optimizer_ratio) : "optimizer");
  }
  if (o.activations) add("activations");
  if (o.params) add("params");
  return label;
}

std::string describe_configuration(const TrainingArguments& a) {
  const std::string precision = !a.precision.empty() ? a.precision
                                : a.bf16             ? "bf16"
                                : a.fp16             ? "fp16"
                                                     : "fp32";
  const std::string checkpointing = a.gradient_checkpointing
                                        ? str_cat("checkpointing ", a.gradient_checkpointing_policy)
                                        : std::string("no checkpointing");
  const std::string tokens =
      a.max_seq_length ? str_cat(*a.max_seq_length, " tokens") : std::string("context tokens");
  const std::string lora =
      a.use_peft
          ? str_cat("LoRA r ", a.lora_r, " on ",
                    a.lora_target_modules.empty() ? "default targets" : a.lora_target_modules, ", ")
          : std::string();
  const std::string fp8 = a.fp8 ? str_cat(" + fp8 ", a.fp8_recipe, " (", a.fp8_format, ")") : "";
  const std::string offload = offload_label(a);  // resolves the arguments: once
  return str_cat(a.model, ", ", lora, precision, fp8, ", ", a.optim, ", ", checkpointing, ", ",
                 a.per_device_train_batch_size, " x ", a.gradient_accumulation_steps, " x ", tokens,
                 a.expandable_segments ? ", expandable segments" : "",
                 a.zero_stage.value_or(0) > 0 ? str_cat(", ZeRO-", *a.zero_stage) : std::string(),
                 offload.empty() ? "" : ", offload " + offload);
}

TrainingPlan plan_training(const TrainingArguments& args, const PlanTarget& target,
                           const DryRunOptions& options) {
  TrainingPlan plan;
  plan.args = args;
  plan.args.device = target.device.str();
  plan.target = target;
  // Note [Planning data-parallel ranks]
  DryRunOptions rank_options = options;
  rank_options.world_size = target.world_size;
  const TrainingConfig config = resolve_training_config(plan.args);
  const int ranks = target.world_size > 1 && config.zero_stage >= 1 ? target.world_size : 1;
  for (int rank = 0; rank < ranks; ++rank) {
    rank_options.rank = rank;
    DryRunResult dry = dry_run_training(plan.args, rank_options);
    const int64_t required = dry.required_bytes() + target.overhead_bytes;
    if (target.world_size > 1) {
      plan.ranks.push_back({rank, dry.peak_allocated_bytes, dry.peak_reserved_bytes, required});
    }
    // The heaviest: most required, then most allocated (the reserved peaks often tie).
    if (rank == 0 || std::pair(required, dry.peak_allocated_bytes) >
                         std::pair(plan.required_bytes, plan.dry.peak_allocated_bytes)) {
      plan.dry = std::move(dry);
      plan.required_bytes = required;
    }
    if (!plan.fits()) break;
  }
  // Note [Planning under the card's capacity]
  // An unbounded dry run keeps every segment it cached; a card of `capacity` bytes would free
  // its cache when a request does not fit and retry (PyTorch's policy), so a run whose allocated
  // peak fits may still run, at the cost of those retries (each synchronises the device). When
  // the unbounded plan does not fit but its allocated peak does, it is dry-run again under the
  // capacity less the overhead, as the card's allocator runs it: it fits when that completes.
  const int64_t allocator_capacity = target.capacity_bytes - target.overhead_bytes;
  if (target.capacity_bytes > 0 && !plan.fits() && ranks == 1 &&
      plan.dry.peak_allocated_bytes <= allocator_capacity &&
      plan.dry.load_peak_allocated_bytes <= allocator_capacity) {
    DryRunOptions capped = rank_options;
    capped.memory_limit = allocator_capacity;
    const int64_t unbounded = plan.dry.peak_reserved_bytes;
    try {
      plan.dry = dry_run_training(plan.args, capped);
      plan.required_bytes = plan.dry.required_bytes() + target.overhead_bytes;
    } catch (const OutOfMemoryError&) {
      plan.out_of_memory_under_capacity = true;
    }
    plan.unbounded_peak_reserved = unbounded;
  }
  if (target.device.is_cuda()) {
    plan.cost =
        estimate_step_cost(plan.dry.config, config, plan.dry.num_parameters, plan.kernels(),
                           target.rates(), 2 * plan.dry.host_bytes_per_step,
                           config.offload.optimizer ? plan.dry.host_peak_allocated_bytes : 0);
  }
  return plan;
}

void plan_with_expandable_segments(TrainingPlan& plan, const DryRunOptions& options) {
  if (plan.dry.expandable_segments ||
      !slack_exceeds_threshold(plan.dry.peak_allocated_bytes, plan.dry.peak_reserved_bytes)) {
    return;
  }
  TrainingArguments args = plan.args;
  args.expandable_segments = true;
  DryRunOptions rank_options = options;
  rank_options.world_size = plan.dry.world_size;
  rank_options.rank = plan.dry.rank;
  const DryRunResult expandable = dry_run_training(args, rank_options);
  plan.with_expandable_segments =
      DryRunResult::Peaks{expandable.peak_allocated_bytes, expandable.peak_reserved_bytes};
}

void plan_against_without_fp8(TrainingPlan& plan, const DryRunOptions& options) {
  if (!plan.args.fp8) return;
  TrainingArguments args = plan.args;
  args.fp8 = false;
  if (training_precision(args).precision == Precision::fp32) {
    args.precision = "bf16";
    args.bf16 = args.fp16 = false;
  }
  plan.without_fp8 = dry_run_training(args, options);
  plan.without_fp8_args = args;
}

StepKernels TrainingPlan::kernels() const {
  return summarize_step_kernels(dry.step_census, target.rates());
}

nlohmann::ordered_json TrainingPlan::to_json() const {
  nlohmann::ordered_json out = dry.to_json();
  out["target"] = target.description();
  out["configuration"] = describe_configuration(args);
  out["cuda_overhead_bytes"] = target.overhead_bytes;
  out["required_bytes"] = required_bytes;
  out["capacity_bytes"] = target.capacity_bytes > 0 ? nlohmann::ordered_json(target.capacity_bytes)
                                                    : nlohmann::ordered_json();
  out["fits"] =
      target.capacity_bytes > 0 ? nlohmann::ordered_json(fits()) : nlohmann::ordered_json();
  out["unbounded_peak_reserved_bytes"] = unbounded_peak_reserved
                                             ? nlohmann::ordered_json(*unbounded_peak_reserved)
                                             : nlohmann::ordered_json();
  out["out_of_memory_under_capacity"] = out_of_memory_under_capacity;
  out["step_time_estimate"] = cost ? cost->to_json() : nlohmann::ordered_json();
  out["with_expandable_segments"] =
      with_expandable_segments ? with_expandable_segments->to_json() : nlohmann::ordered_json();
  nlohmann::ordered_json per_rank = nlohmann::ordered_json::array();
  for (const RankPeaks& r : ranks) {
    per_rank.push_back({{"rank", r.rank},
                        {"peak_allocated_bytes", r.peak_allocated},
                        {"peak_reserved_bytes", r.peak_reserved},
                        {"required_bytes", r.required}});
  }
  out["ranks"] = per_rank;
  out["kernels"] = kernels().to_json();
  if (without_fp8) {
    out["without_fp8"] = {{"configuration", describe_configuration(without_fp8_args)},
                          {"peak_allocated_bytes", without_fp8->peak_allocated_bytes},
                          {"peak_reserved_bytes", without_fp8->peak_reserved_bytes},
                          {"activations_at_peak",
                           without_fp8->at_peak[static_cast<size_t>(MemoryCategory::activations)]}};
  }
  return out;
}

std::string TrainingPlan::format() const {
  std::string text;
  auto line = [&](const char* format, auto... values) {
    char buffer[256];
    std::snprintf(buffer, sizeof buffer, format, values...);
    text += buffer;
  };
  text += str_cat("plan: ", describe_configuration(args), " on ", target.description(), "\n");
  line(
      "  %.2fM parameters, %s of weights in the %s recipe; dry run of %d steps on the meta "
      "device in %.2f s\n",
      static_cast<double>(dry.num_parameters) / 1e6, format_bytes(dry.parameter_bytes).c_str(),
      dry.recipe.c_str(), dry.steps, dry.seconds);
  if (!dry.data_batch.empty()) {
    text += str_cat("  batch planned from the data, the largest it makes: ", dry.data_batch, "\n");
  }
  if (dry.world_size > 1) {
    line(
        "  data parallel over %d ranks, ZeRO stage %lld: rank %d's dry run below (Note [Planning "
        "data-parallel ranks])\n",
        dry.world_size, static_cast<long long>(dry.zero_stage), dry.rank);
    std::string peaks;
    for (const RankPeaks& r : ranks) {
      peaks +=
          str_cat(peaks.empty() ? "" : ", ", "rank ", r.rank, " ", format_bytes(r.peak_allocated));
    }
    if (ranks.size() > 1) line("  peak allocated per rank: %s\n", peaks.c_str());
  }
  line("\n  %-26s %14s %14s %10s\n", "at the peak", "dry run", "formula", "formula/run");
  const FormulaMemory& f = dry.formula;
  auto row = [&](const char* name, int64_t run, std::optional<int64_t> guess) {
    if (!guess) {
      line("  %-26s %14s %14s\n", name, format_bytes(run).c_str(), "-");
      return;
    }
    const std::string ratio =
        run > 0
            ? str_cat(std::lround(100.0 * static_cast<double>(*guess) / static_cast<double>(run)),
                      "%")
            : std::string("-");
    line("  %-26s %14s %14s %10s\n", name, format_bytes(run).c_str(), format_bytes(*guess).c_str(),
         ratio.c_str());
  };
  auto at = [&](MemoryCategory c) { return dry.at_peak[static_cast<size_t>(c)]; };
  row("parameters", at(MemoryCategory::parameters), f.parameters);
  row("gradients", at(MemoryCategory::gradients), f.gradients);
  row("optimizer_states", at(MemoryCategory::optimizer_states), f.optimizer_states);
  row("activations", at(MemoryCategory::activations), f.activations);
  row("temporaries", at(MemoryCategory::temporaries), std::nullopt);
  row("peak allocated", dry.peak_allocated_bytes, f.total());
  row("allocator_slack", dry.allocator_slack, std::nullopt);
  row("peak reserved", dry.peak_reserved_bytes, std::nullopt);
  if (dry.load_peak_reserved_bytes > dry.peak_reserved_bytes) {
    row("model load peak (reserved)", dry.load_peak_reserved_bytes, std::nullopt);
  }
  if (target.overhead_bytes > 0) {
    line("  %-26s %14s   (%s, Note [CUDA overhead per GPU family])\n", "CUDA context+workspaces",
         format_bytes(target.overhead_bytes).c_str(), target.overhead_source.c_str());
  }
  line("  %-26s %14s\n", "required", format_bytes(required_bytes).c_str());
  if (dry.host_required_bytes() > 0) {
    line("  %-26s %14s   (offload's host pool: peak allocated %s; Note [The host pool])\n",
         "host RAM required", format_bytes(dry.host_required_bytes()).c_str(),
         format_bytes(dry.host_peak_allocated_bytes).c_str());
  }
  text +=
      format_slack_report(dry.at_reserved_peak, dry.peak_allocated_bytes, dry.peak_reserved_bytes);
  if (with_expandable_segments) {
    const int64_t slack = with_expandable_segments->reserved - with_expandable_segments->allocated;
    line("  with expandable segments the dry run reserves %s (slack %s, %.1f%%): %s less\n",
         format_bytes(with_expandable_segments->reserved).c_str(), format_bytes(slack).c_str(),
         100.0 * static_cast<double>(slack) /
             static_cast<double>(std::max<int64_t>(1, with_expandable_segments->reserved)),
         format_bytes(
             std::max<int64_t>(0, dry.peak_reserved_bytes - with_expandable_segments->reserved))
             .c_str());
  }
  if (without_fp8) {
    // What FP8 changes for this model: its FP8 inputs saved for backward and its weight copies,
    // scales and histories against the same step without them.
    text += str_cat("\n  FP8 against ", describe_configuration(without_fp8_args), ":\n");
    line("  %-26s %14s %14s %14s\n", "", "with FP8", "without", "difference");
    auto compare = [&](const char* name, int64_t with, int64_t without) {
      const int64_t d = with - without;
      const std::string diff = str_cat(
          d < 0 ? "-" : "+", format_bytes(d < 0 ? -d : d), " (",
          without > 0 ? std::lround(100.0 * static_cast<double>(d) / static_cast<double>(without))
                      : 0,
          "%)");
      line("  %-26s %14s %14s %14s\n", name, format_bytes(with).c_str(),
           format_bytes(without).c_str(), diff.c_str());
    };
    compare("activations at the peak", at(MemoryCategory::activations),
            without_fp8->at_peak[static_cast<size_t>(MemoryCategory::activations)]);
    compare("peak allocated", dry.peak_allocated_bytes, without_fp8->peak_allocated_bytes);
    compare("peak reserved", dry.peak_reserved_bytes, without_fp8->peak_reserved_bytes);
  }
  line(
      "  formula bytes per parameter: weights %.1f, gradients %.1f, optimizer %.2f "
      "(Note [Formula memory])\n",
      f.weight_bytes_per_parameter, f.gradient_bytes_per_parameter,
      f.optimizer_bytes_per_parameter);
  if (target.capacity_bytes > 0) {
    const int64_t spare = target.capacity_bytes - required_bytes;
    line("  %s in %s: %s %s\n", fits() ? "fits" : "does NOT fit",
         format_bytes(target.capacity_bytes).c_str(),
         format_bytes(spare < 0 ? -spare : spare).c_str(), spare < 0 ? "short" : "to spare");
    if (unbounded_peak_reserved && !out_of_memory_under_capacity) {
      line(
          "  under the card's capacity the allocator frees its cache and retries %lld requests "
          "(each a device synchronisation); unbounded it would reserve %s\n",
          static_cast<long long>(dry.alloc_retries),
          format_bytes(*unbounded_peak_reserved).c_str());
    } else if (unbounded_peak_reserved) {
      line(
          "  its allocated peak fits, but under the card's capacity it runs out of memory even "
          "after freeing the cache\n");
    }
  }
  if (cost) {
    line(
        "  step time estimate on %s: %.4f s (%lld launches: roofline %.4f s, launch-bound "
        "%.4f s; Note [Step time estimate])\n",
        target.rates().name.c_str(), cost->seconds(), static_cast<long long>(cost->launches),
        cost->roofline_seconds, cost->launch_seconds);
    if (cost->host_transfer_bytes > 0 || cost->host_optimizer_seconds > 0) {
      line(
          "  offload: %s per step over the host link (%.0f GB/s) %.3f s, the optimizer on the "
          "host %.3f s\n",
          format_bytes(static_cast<int64_t>(cost->host_transfer_bytes)).c_str(),
          target.rates().host_link_gb_per_s, cost->host_transfer_seconds,
          cost->host_optimizer_seconds);
    }
  }
  return text;
}

}  // namespace headroom

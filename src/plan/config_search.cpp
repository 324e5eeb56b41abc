// The search of Note [Configuration search].
#include "plan/config_search.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>

#include "core/error.h"
#include "memory/alloc_config.h"
#include "train/progress.h"
#include "optim/optimizer_factory.h"
#include "train/trainer.h"

namespace headroom {

namespace {

std::vector<std::string> default_precisions(const PlanTarget& target) {
  if (target.gpu && !target.gpu->has_bf16) return {"fp16", "fp32"};
  return {"bf16", "pure_bf16", "pure_bf16+kahan", "fp16", "fp32"};
}

std::vector<std::string> default_optims() {
  using K = OptimizerKind;
  std::vector<std::string> names;
  for (const K kind : {K::adamw, K::adamw_bf16, K::adamw_8bit, K::adafactor, K::lion, K::lion_8bit,
                       K::sgd, K::lomo}) {
    names.emplace_back(optimizer_kind_name(kind));
  }
  return names;
}

std::vector<std::string> default_policies() { return {"none", "selective", "every_2", "full"}; }

std::vector<std::string> default_adapters(const TrainingArguments& base) {
  if (base.use_peft) {
    return {str_cat(base.load_in_4bit ? "qlora:" : "lora:", base.lora_r,
                    base.lora_target_modules.empty() ? "" : ":" + base.lora_target_modules)};
  }
  return {"full", "lora:16", "lora:16:all-linear", "qlora:16", "qlora:16:all-linear"};
}

std::vector<std::string> default_allocators(const TrainingArguments& base) {
  if (base.expandable_segments || AllocatorConfig::from_env().expandable_segments) {
    return {"expandable_segments"};
  }
  return {"native", "expandable_segments"};
}

std::vector<int64_t> default_zero_stages(const TrainingArguments& base, const PlanTarget& target) {
  if (target.world_size <= 1) return {};
  if (base.zero_stage || !base.deepspeed.empty()) return {resolve_training_config(base).zero_stage};
  return {0, 1, 2, 3};
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// See Note [Configurations that need ZeRO-3].
std::string zero3_note(const std::string& adapter, const TrainingPlan& closest,
                       const PlanTarget& target, const std::vector<int64_t>& stages) {
  const int64_t parameters = closest.dry.at_peak[static_cast<size_t>(MemoryCategory::parameters)];
  std::string tried;
  for (const int64_t stage : stages) tried += str_cat(tried.empty() ? "" : ", ", stage);
  const std::string head =
      str_cat(adapter, ": nothing fits on ", target.description(), " at ZeRO stages ", tried,
              "; the closest, ", describe_configuration(closest.args), ", needs ",
              format_bytes(closest.required_bytes), " per rank");
  if (std::find(stages.begin(), stages.end(), 3) != stages.end()) return head;
  if (parameters + target.overhead_bytes >= target.capacity_bytes) {
    return str_cat(head, ", of which the parameters every rank holds whole below stage 3 are ",
                   format_bytes(parameters), ": only sharding them, ZeRO-3, could fit it");
  }
  return str_cat(head, "; ZeRO-3 (parameters sharded) is the stage left to try");
}

}  // namespace

void apply_adapter_choice(TrainingArguments& args, const std::string& choice) {
  if (choice == "full") {
    args.use_peft = false;
    args.load_in_4bit = false;
    return;
  }
  // "lora:R[:TARGETS]", or "qlora:R[:TARGETS]": the same on a 4-bit base.
  const bool qlora = choice.starts_with("qlora:");
  const size_t start = qlora ? 6 : 5;
  const bool lora = qlora || choice.starts_with("lora:");
  const size_t colon = lora ? choice.find(':', start) : std::string::npos;
  const std::string rank =
      lora ? choice.substr(start, colon == std::string::npos ? colon : colon - start)
           : std::string();
  const bool digits = !rank.empty() && rank.size() <= 9 &&
                      rank.find_first_not_of("0123456789") == std::string::npos;
  if (!lora || !digits || std::stoll(rank) <= 0) {
    throw ValueError(str_cat("search adapters: '", choice,
                             "' is not full, lora:R, qlora:R or (q)lora:R:TARGETS (R > 0)"));
  }
  args.use_peft = true;
  args.lora_r = std::stoll(rank);
  args.lora_target_modules = colon == std::string::npos ? "" : choice.substr(colon + 1);
  if (qlora && !args.load_in_4bit) {
    // QLoRA's recipe: NF4 with double quantization, computing in the recipe's dtype.
    args.load_in_4bit = true;
    args.bnb_4bit_quant_type = "nf4";
    args.bnb_4bit_use_double_quant = true;
  }
  if (!qlora) args.load_in_4bit = false;
}

SearchResult search_configurations(const TrainingArguments& base, const PlanTarget& target,
                                   const SearchSpace& space,
                                   const std::function<void(int64_t)>& progress) {
  if (target.capacity_bytes <= 0) {
    throw ValueError("plan search: no memory to fit in (give --gpu-memory or --gpu)");
  }
  const auto start = std::chrono::steady_clock::now();
  SearchResult result;
  result.effective_batch = base.per_device_train_batch_size * base.gradient_accumulation_steps;
  // The search space typed once: each choice's name (as the table prints it) and its meaning.
  struct PrecisionChoice {
    std::string name;
    PrecisionRecipe recipe;
  };
  std::vector<PrecisionChoice> precisions;
  for (const std::string& name :
       space.precisions.empty() ? default_precisions(target) : space.precisions) {
    precisions.push_back({name, parse_precision(name)});
  }
  struct OptimizerChoice {
    std::string name;
    OptimizerKind kind;
  };
  std::vector<OptimizerChoice> optims;
  const std::vector<std::string> known = optimizer_names();
  for (const std::string& name : space.optims.empty() ? default_optims() : space.optims) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw ValueError(str_cat("search optim: unknown optimizer '", name, "'"));
    }
    optims.push_back({name, parse_optimizer_kind(name)});
  }
  struct PolicyChoice {
    std::string name;
    CheckpointPolicy policy;
  };
  std::vector<PolicyChoice> policies;
  for (const std::string& name : space.policies.empty() ? default_policies() : space.policies) {
    policies.push_back({name, parse_checkpoint_policy(name)});
  }
  struct AdapterChoice {
    std::string name;
    bool full;  // a full fine-tune, no adapters
  };
  std::vector<AdapterChoice> adapters;
  for (const std::string& name : space.adapters.empty() ? default_adapters(base) : space.adapters) {
    TrainingArguments check = base;
    apply_adapter_choice(check, name);
    adapters.push_back({name, !check.use_peft});
  }
  const bool base_offloads = resolve_training_config(base).offload.any();
  // The allocator policies in the order tried, as expandable_segments on or off.
  std::vector<bool> expandable_choices;
  for (const std::string& allocator :
       space.allocators.empty() ? default_allocators(base) : space.allocators) {
    if (allocator != "native" && allocator != "expandable_segments") {
      throw ValueError(
          str_cat("search allocators: '", allocator, "' is not native or expandable_segments"));
    }
    expandable_choices.push_back(allocator == "expandable_segments");
  }
  // std::nullopt: one process, the base's zero_stage as it is.
  std::vector<std::optional<int64_t>> stage_choices;
  for (const int64_t stage :
       space.zero_stages.empty() ? default_zero_stages(base, target) : space.zero_stages) {
    if (stage < 0 || stage > 3) {
      throw ValueError(str_cat("search zero stages: ", stage, " is not 0, 1, 2 or 3"));
    }
    stage_choices.emplace_back(stage);
  }
  if (stage_choices.empty()) stage_choices.emplace_back(std::nullopt);
  result.world_size = target.world_size;
  const DryRunOptions options{.steps = 2, .include_eval = false, .max_micro_batches = 2};
  auto faster = [](const TrainingPlan& a, const TrainingPlan& b) {
    const double ta = a.cost ? a.cost->seconds() : 0.0;
    const double tb = b.cost ? b.cost->seconds() : 0.0;
    if (ta != tb) return ta < tb;
    return a.required_bytes < b.required_bytes;
  };
  // One row: the micro-batches from the smallest up; the fastest split that fits is kept.
  // False when the engine refuses the precision x optimizer.
  std::optional<TrainingPlan> closest_of_adapter;  // the adapter choice's, that did not fit
  auto search_row = [&](const AdapterChoice& adapter, const PrecisionChoice& precision,
                        const OptimizerChoice& optim, const PolicyChoice& policy) {
    std::optional<TrainingPlan> best;
    const bool checkpointing = policy.policy.kind != CheckpointPolicy::Kind::none;
    for (int64_t micro : divisors(result.effective_batch)) {
      // LOMO updates in backward: no accumulation.
      if (updates_in_backward(optim.kind) && micro != result.effective_batch) continue;
      TrainingArguments args = base;
      apply_adapter_choice(args, adapter.name);
      args.precision = precision.name;
      args.bf16 = args.fp16 = false;
      args.optim = optim.name;
      args.gradient_checkpointing = checkpointing;
      if (checkpointing) args.gradient_checkpointing_policy = policy.name;
      args.per_device_train_batch_size = micro;
      args.gradient_accumulation_steps = result.effective_batch / micro;
      args.eval_strategy = "no";
      std::optional<TrainingPlan> plan;
      // Offload only when nothing else fits (at any ZeRO stage): the optimizer's states and step
      // first, then the saved activations too. A full fine-tune's optimizer only (LoRA's states
      // are small, LOMO keeps none), and not where the base arguments offload already.
      std::vector<int> offload_levels = {0};
      if (adapter.full && !updates_in_backward(optim.kind) && !base_offloads) {
        offload_levels = {0, 1, 2};
      }
      for (const int offload : offload_levels) {
        for (const std::optional<int64_t>& stage : stage_choices) {
          if (stage) args.zero_stage = *stage;
          for (const bool expandable : expandable_choices) {
            // The next allocator policy (or stage, or offload) only for a split the one before
            // could not fit.
            if (plan && plan->fits()) break;
            args.expandable_segments = expandable;
            args.offload_optimizer = offload >= 1;
            args.offload_activations = offload >= 2;
            try {
              TrainingPlan attempt = plan_training(args, target, options);
              if (!plan || attempt.fits() || attempt.required_bytes < plan->required_bytes) {
                plan = std::move(attempt);
              }
            } catch (const Error& e) {
              // A combination the engine refuses; its error says why.
              result.unsupported.push_back(str_cat(adapter.full ? "" : adapter.name + " + ",
                                                   precision.name, " + ", optim.name, ": ",
                                                   e.what()));
              return false;
            }
            ++result.dry_runs;
            if (progress) progress(result.dry_runs);
          }
        }
      }
      if (!plan->fits()) {
        ++result.rejected;
        if (!closest_of_adapter || plan->required_bytes < closest_of_adapter->required_bytes) {
          closest_of_adapter = *plan;
        }
        if (!result.closest || plan->required_bytes < result.closest->required_bytes) {
          result.closest = std::move(plan);
        }
        break;  // larger micro-batches need more
      }
      if (!best || faster(*plan, *best)) best = std::move(plan);
    }
    if (best) result.fitting.push_back(std::move(*best));
    return true;
  };
  for (const AdapterChoice& adapter : adapters) {
    const size_t fitting_before = result.fitting.size();
    closest_of_adapter.reset();
    for (const PrecisionChoice& precision : precisions) {
      const PrecisionRecipe& recipe = precision.recipe;
      for (const OptimizerChoice& optim : optims) {
        // No loss scaling inside backward.
        if (updates_in_backward(optim.kind) && recipe.loss_scaling) continue;
        // Pure bf16 makes adamw_torch's moments bf16 already.
        if (optim.kind == OptimizerKind::adamw_bf16 && recipe.precision == Precision::pure_bf16) {
          continue;
        }
        if (recipe.kahan_summation && optim.kind != OptimizerKind::adamw) continue;  // AdamW's
        if (!adapter.full && optim.kind != OptimizerKind::adamw) continue;           // see the Note
        for (const PolicyChoice& policy : policies) {
          if (!search_row(adapter, precision, optim, policy)) break;
        }
      }
    }
    if (target.world_size > 1 && result.fitting.size() == fitting_before && closest_of_adapter) {
      std::vector<int64_t> tried;
      for (const auto& stage : stage_choices) tried.push_back(stage.value_or(0));
      result.notes.push_back(zero3_note(adapter.name, *closest_of_adapter, target, tried));
    }
  }
  std::stable_sort(result.fitting.begin(), result.fitting.end(), faster);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

namespace {

// "full", or "lora r16 q_proj,v_proj" / "qlora r16 default" style for the table.
std::string adapter_label(const TrainingArguments& a) {
  if (!a.use_peft) return "full";
  return str_cat(a.load_in_4bit ? "qlora r" : "lora r", a.lora_r, " ",
                 a.lora_target_modules.empty() ? "default" : a.lora_target_modules);
}

}  // namespace

nlohmann::ordered_json SearchResult::to_json(int64_t max_rows) const {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (size_t i = 0; i < fitting.size() && static_cast<int64_t>(i) < max_rows; ++i) {
    const TrainingPlan& p = fitting[i];
    rows.push_back({{"adapter", adapter_label(p.args)},
                    {"precision", p.dry.recipe},
                    {"optim", p.args.optim},
                    {"gradient_checkpointing_policy",
                     p.args.gradient_checkpointing ? p.args.gradient_checkpointing_policy : "none"},
                    {"expandable_segments", p.args.expandable_segments},
                    {"zero_stage", p.dry.zero_stage},
                    {"offload", offload_label(p.args)},
                    {"host_required_bytes", p.dry.host_required_bytes()},
                    {"per_device_train_batch_size", p.args.per_device_train_batch_size},
                    {"gradient_accumulation_steps", p.args.gradient_accumulation_steps},
                    {"peak_allocated_bytes", p.dry.peak_allocated_bytes},
                    {"peak_reserved_bytes", p.dry.peak_reserved_bytes},
                    {"required_bytes", p.required_bytes},
                    {"step_seconds_estimate", p.cost ? p.cost->seconds() : 0.0}});
  }
  return {{"effective_batch", effective_batch},
          {"fitting", static_cast<int64_t>(fitting.size())},
          {"dry_runs", dry_runs},
          {"rejected", rejected},
          {"search_seconds", seconds},
          {"unsupported", unsupported},
          {"world_size", world_size},
          {"notes", notes},
          {"configurations", rows},
          {"closest_required_bytes",
           closest ? nlohmann::ordered_json(closest->required_bytes) : nlohmann::ordered_json()}};
}

std::string SearchResult::format(int64_t max_rows) const {
  std::string text;
  char line[320];
  std::snprintf(line, sizeof line,
                "\n%lld configurations fit (%lld dry runs in %.1f s, %lld too large), effective "
                "batch %lld, best first by estimated step time:\n",
                static_cast<long long>(fitting.size()), static_cast<long long>(dry_runs), seconds,
                static_cast<long long>(rejected), static_cast<long long>(effective_batch));
  text += line;
  for (const std::string& reason : unsupported) text += str_cat("  not searched: ", reason, "\n");
  for (const std::string& note : notes) text += str_cat("  ", note, "\n");
  if (fitting.empty()) {
    if (closest) {
      text += str_cat("  closest: ", describe_configuration(closest->args), " needs ",
                      format_bytes(closest->required_bytes), "\n");
    }
    return text;
  }
  // With several ranks, the ZeRO stage each configuration needs.
  const bool ranks = world_size > 1;
  std::snprintf(line, sizeof line,
                "  %4s%s  %-22s %-15s %-12s %-10s %-10s %12s %14s %14s %10s  %s\n", "rank",
                ranks ? "  zero" : "", "adapter", "precision", "optim", "ckpt", "allocator",
                "micro x acc", "peak alloc", "required", "step s",
                ranks ? "offload (host RAM per rank)" : "offload (host RAM)");
  text += line;
  for (size_t i = 0; i < fitting.size() && static_cast<int64_t>(i) < max_rows; ++i) {
    const TrainingPlan& p = fitting[i];
    const std::string split =
        str_cat(p.args.per_device_train_batch_size, " x ", p.args.gradient_accumulation_steps);
    const std::string offload =
        p.dry.host_required_bytes() > 0
            ? str_cat(offload_label(p.args), " (", format_bytes(p.dry.host_required_bytes()), ")")
            : std::string("-");
    std::snprintf(
        line, sizeof line, "  %4zu%s  %-22s %-15s %-12s %-10s %-10s %12s %14s %14s %10.4g  %s\n",
        i + 1, ranks ? str_cat("  ", p.dry.zero_stage, "   ").c_str() : "",
        adapter_label(p.args).c_str(), p.dry.recipe.c_str(), p.args.optim.c_str(),
        p.args.gradient_checkpointing ? p.args.gradient_checkpointing_policy.c_str() : "none",
        p.dry.expandable_segments ? "expandable" : "native", split.c_str(),
        format_bytes(p.dry.peak_allocated_bytes).c_str(), format_bytes(p.required_bytes).c_str(),
        p.cost ? p.cost->seconds() : 0.0, offload.c_str());
    text += line;
  }
  if (static_cast<int64_t>(fitting.size()) > max_rows) {
    std::snprintf(line, sizeof line, "  ... %lld more (--max-results)\n",
                  static_cast<long long>(fitting.size()) - max_rows);
    text += line;
  }
  return text;
}

}  // namespace headroom

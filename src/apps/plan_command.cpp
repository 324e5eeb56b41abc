// `headroom plan` on CLI11: the training options of `headroom train` plus the plan's own.
#include "apps/plan_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>

#include "apps/train_command.h"
#include "core/error.h"
#include "memory/memory_history.h"
#include "memory/memory_snapshot.h"
#include "plan/config_search.h"
#include "plan/gpu_specs.h"
#include "plan/inference_plan.h"
#include "plan/training_plan.h"

namespace headroom {

namespace {

std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

std::vector<int64_t> zero_stage_list(const std::string& text) {
  std::vector<int64_t> stages;
  for (const std::string& item : comma_list(text)) {
    if (item.size() != 1 || item[0] < '0' || item[0] > '9') {
      throw ValueError(str_cat("search_zero_stages: '", item, "' is not a stage number"));
    }
    stages.push_back(item[0] - '0');
  }
  return stages;
}

std::string gpu_names() {
  std::string names;
  for (const GpuSpec& spec : gpu_specs()) names += (names.empty() ? "" : ", ") + spec.name;
  return names;
}

}  // namespace

CLI::App* add_plan_command(CLI::App& app, PlanOptions& o) {
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Predict a run's memory by dry run on the meta device (the options of train), "
      "and search the configurations that fit a GPU");
  add_training_options(*plan, TrainingOptionsHelp::read_by_plan);
  const char* group = "Plan";
  auto last = CLI::MultiOptionPolicy::TakeLast;
  plan->add_flag("--json", o.json, "print one JSON object")->group(group);
  plan->add_flag("--kernels", o.kernels,
                 "also print the step's kernel launches per family: GB moved, GFLOP and "
                 "roofline time on --gpu's card (else the H100); --json always has them")
      ->group(group);
  plan->add_option("--gpu", o.gpu, "plan for this GPU (" + gpu_names() + ") and search")
      ->group(group)
      ->multi_option_policy(last);
  plan->add_option("--gpu-memory,--gpu_memory", o.gpu_memory,
                   "fit in this much GPU memory (e.g. 24GiB) and search; overrides --gpu's")
      ->group(group)
      ->multi_option_policy(last);
  plan->add_flag("--inference", o.inference,
                 "weights + KV cache + prefill for per_device_eval_batch_size x max_seq_length")
      ->group(group);
  plan->add_flag("--no-search,--no_search", o.no_search,
                 "with --gpu / --gpu-memory: check the given configuration only")
      ->group(group);
  plan->add_option("--search-precisions,--search_precisions", o.search_precisions,
                   "precisions to search, comma-separated (default: all the GPU supports)")
      ->group(group);
  plan->add_option("--search-optims,--search_optims", o.search_optims,
                   "optimizers to search (default: adamw_torch, adamw_bf16, adamw_8bit, "
                   "adafactor, lion, lion_8bit, sgd, lomo)")
      ->group(group);
  plan->add_option("--search-policies,--search_policies", o.search_policies,
                   "checkpointing to search: none, selective, every_N, full (default: none, "
                   "selective, every_2, full)")
      ->group(group);
  plan->add_option("--search-adapters,--search_adapters", o.search_adapters,
                   "what trains, comma-separated: full, lora:R (the default targets), "
                   "lora:R:all-linear, or qlora:R[:all-linear] on a 4-bit NF4 base (default: "
                   "full, lora:16, lora:16:all-linear, qlora:16, qlora:16:all-linear; with "
                   "--use_peft: that adapter)")
      ->group(group);
  plan->add_option("--search-allocators,--search_allocators", o.search_allocators,
                   "allocator policies, in the order tried, comma-separated: native, "
                   "expandable_segments (the next only for a configuration that does not fit; "
                   "default: native,expandable_segments, or expandable_segments with "
                   "--expandable_segments)")
      ->group(group);
  plan->add_option("--search-zero-stages,--search_zero_stages", o.search_zero_stages,
                   "with --world_size: ZeRO stages, in the order tried, comma-separated: 0, 1, 2, "
                   "3 (the next only for a configuration that does not fit; default: 0,1,2,3, or "
                   "--zero_stage's alone)")
      ->group(group);
  plan->add_option("--max-results,--max_results", o.max_results, "rows of the search table")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(group);
  plan->add_option("--steps", o.steps,
                   "training steps to dry-run (the second counts the "
                   "optimizer states created in the first)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(group);
  plan->add_option("--world_size,--world-size", o.world_size,
                   "data-parallel ranks (one GPU each, as mpirun -np N): plan one rank's memory "
                   "with --zero_stage's sharding, the heaviest rank's when ZeRO shares differ; "
                   "the search then tries ZeRO stages 0, 1 and 2")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group(group);
  return plan;
}

int run_plan_command(const CLI::App& command, const PlanOptions& o) {
  const TrainingArguments args = train_arguments_from(command, DataCheck::not_read);
  PlanTarget target = plan_target(args.device, o.gpu, o.gpu_memory);
  target.world_size = o.world_size;
  if (o.inference) {
    if (o.world_size > 1) {
      throw ValueError(str_cat("world_size: ", o.world_size,
                               " with --inference, which plans one "
                               "process (data parallel is for training)"));
    }
    const InferencePlan plan = plan_inference(args, target);
    std::printf("%s\n", o.json ? plan.to_json().dump(2).c_str() : plan.format().c_str());
    return 0;
  }
  // --memory_snapshot: the dry run's allocation history, the predicted timeline for memory_viz.
  if (!args.memory_snapshot.empty()) record_memory_history();
  TrainingPlan plan = plan_training(args, target, {.steps = o.steps});
  if (!args.memory_snapshot.empty()) {
    dump_memory_snapshot(args.memory_snapshot);
    record_memory_history(0);
    if (!o.json)
      std::printf("dry run's memory snapshot written to %s\n", args.memory_snapshot.c_str());
  }
  // Note [Slack report]: what the fix would give, measured (after the snapshot is written, so
  // that it holds the configuration asked for).
  plan_with_expandable_segments(plan, {.steps = o.steps});
  plan_against_without_fp8(plan, {.steps = o.steps});
  nlohmann::ordered_json json = plan.to_json();
  if (!o.json) std::printf("%s", plan.format().c_str());
  if (!o.json && o.kernels) std::printf("%s", plan.kernels().format().c_str());
  if (target.capacity_bytes > 0 && !o.no_search) {
    const SearchSpace space{comma_list(o.search_precisions), comma_list(o.search_optims),
                            comma_list(o.search_policies),   comma_list(o.search_adapters),
                            comma_list(o.search_allocators), zero_stage_list(o.search_zero_stages)};
    const bool tty = isatty(STDERR_FILENO) != 0;
    const SearchResult search = search_configurations(args, target, space, [&](int64_t runs) {
      if (tty) std::fprintf(stderr, "\rsearching: %lld dry runs", static_cast<long long>(runs));
    });
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (o.json) {
      json["search"] = search.to_json(o.max_results);
    } else {
      std::printf("%s", search.format(o.max_results).c_str());
    }
  }
  if (o.json) std::printf("%s\n", json.dump(2).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace headroom

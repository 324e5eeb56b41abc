// `headroom plan` on CLI11: the training options of `headroom train` plus the plan's own.
#include "apps/plan_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>

#include "apps/train_command.h"
#include "apps/train_options.h"
#include "core/error.h"
#include "memory/memory_history.h"
#include "memory/memory_snapshot.h"
#include "plan/config_search.h"
#include "plan/gpu_specs.h"
#include "plan/inference_plan.h"
#include "plan/max_context.h"
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

// One card's longest contexts: as given, and with the memory savers unless --no-search.
struct CardContexts {
  PlanTarget target;
  MaxContext given;
  std::optional<MaxContext> saved;
  const MaxContext& longest() const {
    return saved && saved->max_seq_length() > given.max_seq_length() ? *saved : given;
  }
};

// Adds m's fields to out.
void add_max_context_json(const MaxContext& m, nlohmann::ordered_json& out) {
  out["techniques"] = m.techniques;
  out["max_seq_length"] = m.max_seq_length();
  out["required_bytes"] = m.plan ? m.plan->required_bytes : 0;
  out["host_bytes"] = m.plan ? m.plan->dry.host_required_bytes() : 0;
  out["step_time_estimate_s"] = m.plan && m.plan->cost ? m.plan->cost->seconds() : 0.0;
  out["command"] = m.plan ? train_command_line(m.args) : "";
  out["dry_runs"] = m.dry_runs;
}

std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

int run_max_context(const TrainingArguments& args, const PlanOptions& o) {
  std::vector<std::string> cards = comma_list(o.gpu);
  if (cards.empty()) cards.push_back("");  // --gpu-memory alone
  if (o.world_size > 1) {
    throw ValueError(str_cat("max_context: plans one process, not --world_size ", o.world_size));
  }
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::vector<CardContexts> rows;
  std::string added;
  const TrainingArguments savers = with_memory_savers(args, &added);
  for (const std::string& card : cards) {
    CardContexts row;
    row.target = plan_target(args.device, card, o.gpu_memory);
    auto progress = [&](int64_t runs) {
      if (tty) {
        std::fprintf(stderr, "\r%s: %lld dry runs", row.target.description().c_str(),
                     static_cast<long long>(runs));
      }
    };
    row.given = find_max_context(args, row.target, progress);
    row.given.techniques = "as given";
    if (!o.no_search && !added.empty()) {
      row.saved = find_max_context(savers, row.target, progress);
      row.saved->techniques = str_cat("+ ", added);
    }
    if (tty) std::fprintf(stderr, "\r\033[K");
    rows.push_back(std::move(row));
  }
  if (o.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const CardContexts& row : rows) {
      nlohmann::ordered_json entry;
      entry["target"] = row.target.description();
      add_max_context_json(row.longest(), entry);
      add_max_context_json(row.given, entry["as_given"]);
      if (row.saved) add_max_context_json(*row.saved, entry["with_memory_savers"]);
      out.push_back(entry);
    }
    std::printf("%s\n", nlohmann::ordered_json{{"max_context", out}}.dump(2).c_str());
    return 0;
  }
  std::printf("longest max_seq_length that fits: %s\n", describe_configuration(args).c_str());
  std::printf("  %-26s %14s %14s %12s %14s\n", "card", "as given",
              o.no_search || added.empty() ? "" : "memory savers", "host RAM", "step estimate");
  for (const CardContexts& row : rows) {
    const MaxContext& best = row.longest();
    std::printf(
        "  %-26s %14s %14s %12s %14s\n", row.target.description().c_str(),
        grouped(row.given.max_seq_length()).c_str(),
        row.saved ? grouped(row.saved->max_seq_length()).c_str() : "",
        best.plan ? format_bytes(static_cast<size_t>(best.plan->dry.host_required_bytes())).c_str()
                  : "-",
        best.plan && best.plan->cost ? str_cat(best.plan->cost->seconds(), " s").c_str() : "-");
  }
  if (!added.empty() && !o.no_search) std::printf("  memory savers: %s\n", added.c_str());
  for (const CardContexts& row : rows) {
    const MaxContext& best = row.longest();
    if (!best.plan) {
      std::printf("%s: not even 16 tokens fit\n", row.target.description().c_str());
      continue;
    }
    std::printf("%s (%s, %s required):\n  %s\n", row.target.description().c_str(),
                grouped(best.max_seq_length()).c_str(),
                format_bytes(static_cast<size_t>(best.plan->required_bytes)).c_str(),
                train_command_line(best.args).c_str());
  }
  std::fflush(stdout);
  return 0;
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
  plan->add_flag("--max_context,--max-context", o.max_context,
                 "the longest max_seq_length that fits --gpu's card (a comma-separated list of "
                 "cards gives a table), as given and with the memory savers that keep the "
                 "results (checkpointing, tiled MLP, offloaded activations, expandable "
                 "segments; --no-search: as given only), with the command that trains it")
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
  if (o.max_context) return run_max_context(args, o);
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

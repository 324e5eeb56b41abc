// QLoRA on a Llama-7B-shaped model (random weights drawn by HF's init, quantized to 4 bits tensor
// by tensor as they are made) for one optimizer step on this machine's CPU, beside the planner's
// dry run of the same configuration: peak allocated and reserved (the run's, as metrics.jsonl
// logs them, and the plan's), the load's peaks, the process's peak resident set and the times.
// The run is the Trainer that `headroom train` runs; it exits 1 when a peak differs from the plan.
//
// Run (Release build; about 5 minutes and 4 GiB of memory on 2 cores for llama-7b):
//   ninja -C build qlora_7b && build/bench/qlora_7b [--model llama-7b] [--context 256]
//       [--r 16] [--targets q_proj,v_proj] [--quant nf4] [--steps 1] [--threads N]
// pure_bf16, full checkpointing, batch 1, AdamW, NF4 with double quantization; the batches are
// README.md's text through the preset's tokenizer.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "bench_support.h"
#include "core/error.h"
#include "memory/device_memory.h"
#include "plan/dry_run.h"
#include "train/trainer.h"

namespace {

using namespace headroom;
using Clock = std::chrono::steady_clock;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Options {
  std::string model = "llama-7b", targets = "q_proj,v_proj", quant = "nf4";
  int64_t context = 256, r = 16, steps = 1, threads = 0;
};

Options parse_options(int argc, char** argv) {
  Options o;
  bench::parse_command_line(
      "qlora_7b",
      "[--model llama-7b] [--context N] [--r N] [--targets LIST] [--quant nf4|fp4] [--steps N] "
      "[--threads N]",
      argc, argv, {}, {{"--model", &o.model}, {"--targets", &o.targets}, {"--quant", &o.quant}},
      {{"--context", &o.context}, {"--r", &o.r}, {"--steps", &o.steps}, {"--threads", &o.threads}});
  return o;
}

TrainingArguments training_arguments(const Options& o, const std::filesystem::path& output_dir) {
  TrainingArguments args;
  args.model = o.model;
  args.data = std::string(HEADROOM_SOURCE_DIR) + "/README.md";
  args.output_dir = output_dir.string();
  args.overwrite_output_dir = true;
  args.device = "cpu";
  args.max_seq_length = o.context;
  args.per_device_train_batch_size = 1;
  args.max_steps = o.steps;
  args.learning_rate = 2e-4;
  args.precision = "pure_bf16";
  args.gradient_checkpointing = true;
  args.use_peft = true;
  args.lora_r = o.r;
  args.lora_alpha = 2.0 * static_cast<double>(o.r);
  args.lora_target_modules = o.targets;
  args.load_in_4bit = true;
  args.bnb_4bit_quant_type = o.quant;
  args.bnb_4bit_use_double_quant = true;
  args.logging_steps = 1;
  args.save_strategy = "no";
  args.sample_max_new_tokens = 0;
  args.disable_tqdm = true;
  return args;
}

double gib(int64_t bytes) { return static_cast<double>(bytes) / kGiB; }

// "equal" or the signed difference run - plan in bytes.
std::string versus(int64_t run, int64_t plan) {
  return run == plan ? "equal" : std::to_string(run - plan) + " B";
}

int run(const Options& o) {
  if (o.threads > 0) omp_set_num_threads(static_cast<int>(o.threads));
  const std::filesystem::path output_dir =
      std::filesystem::temp_directory_path() / ("headroom_qlora_7b_" + std::to_string(getpid()));
  const TrainingArguments args = training_arguments(o, output_dir);

  const auto plan_start = Clock::now();
  const DryRunResult plan =
      dry_run_training(args, {.steps = static_cast<int>(o.steps), .include_eval = false});
  const double plan_seconds = std::chrono::duration<double>(Clock::now() - plan_start).count();
  std::printf("plan (dry run on meta, %.2f s): %s, %.2f B parameters, %lld B of weights\n",
              plan_seconds, plan.recipe.c_str(), static_cast<double>(plan.num_parameters) / 1e9,
              static_cast<long long>(plan.parameter_bytes));

  empty_cache(kCPU);
  reset_peak_memory_stats(kCPU);
  const auto load_start = Clock::now();
  int status = 0;
  int64_t run_allocated = 0, run_reserved = 0, load_allocated = 0, load_reserved = 0;
  double load_seconds = 0.0, train_seconds = 0.0, loss = 0.0;
  {
    Trainer trainer(args);
    load_seconds = std::chrono::duration<double>(Clock::now() - load_start).count();
    load_allocated = static_cast<int64_t>(max_memory_allocated(kCPU));
    load_reserved = static_cast<int64_t>(max_memory_reserved(kCPU));
    const auto train_start = Clock::now();
    status = trainer.train();
    train_seconds = std::chrono::duration<double>(Clock::now() - train_start).count();
    for (const auto& entry : trainer.log_history()) {
      if (entry.contains("peak_allocated_bytes")) {
        run_allocated = entry["peak_allocated_bytes"].get<int64_t>();
        run_reserved = entry["peak_reserved_bytes"].get<int64_t>();
        loss = entry["loss"].get<double>();
      }
    }
  }
  std::filesystem::remove_all(output_dir);

  std::printf(
      "\n%s, QLoRA %s + double quantization, LoRA r %lld alpha %lld on %s, pure_bf16, "
      "full checkpointing, batch 1 x %lld tokens, %lld step(s), %d threads\n",
      o.model.c_str(), o.quant.c_str(), static_cast<long long>(o.r),
      static_cast<long long>(2 * o.r), o.targets.c_str(), static_cast<long long>(o.context),
      static_cast<long long>(o.steps), omp_get_max_threads());
  std::printf("  %-34s %18s %18s  %s\n", "", "run", "plan", "run - plan");
  auto row = [](const char* name, int64_t run, int64_t plan) {
    std::printf("  %-34s %18lld %18lld  %s  (%.3f GiB)\n", name, static_cast<long long>(run),
                static_cast<long long>(plan), versus(run, plan).c_str(), gib(run));
  };
  row("peak allocated, training (B)", run_allocated, plan.peak_allocated_bytes);
  row("peak reserved, training (B)", run_reserved, plan.peak_reserved_bytes);
  row("peak allocated, load (B)", load_allocated, plan.load_peak_allocated_bytes);
  row("peak reserved, load (B)", load_reserved, plan.load_peak_reserved_bytes);
  std::printf("  peak resident set of the process: %.3f GiB\n",
              static_cast<double>(bench::peak_rss()) / kGiB);
  std::printf("  load %.1f s, training %.1f s (%.1f tokens/s), loss %.4f, exit status %d\n",
              load_seconds, train_seconds, static_cast<double>(o.steps * o.context) / train_seconds,
              loss, status);
  const bool exact = run_allocated == plan.peak_allocated_bytes &&
                     run_reserved == plan.peak_reserved_bytes &&
                     load_allocated == plan.load_peak_allocated_bytes &&
                     load_reserved == plan.load_peak_reserved_bytes;
  std::printf("  the step %s; peaks %s the plan\n", status == 0 ? "completed" : "FAILED",
              exact ? "equal" : "DIFFER FROM");
  return status == 0 && exact ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_options(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qlora_7b: %s\n", e.what());
    return 1;
  }
}

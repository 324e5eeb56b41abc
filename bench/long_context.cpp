// Long context on the CPU: a Llama-shaped model of about 100M parameters, QLoRA (NF4 base, LoRA
// r 16 on all linear layers), bf16 autocast and full checkpointing, trained with the Trainer on
// rows of --tokens tokens, with and without the tiled MLP and offloaded checkpoint inputs, side
// by side from one run: the median step time and tokens/s, each run's device and host peaks
// beside its plan's (dry_run_training, what `headroom plan` prints), the process's RSS, and the
// losses, which must equal the first mode's (bit for bit for the first step: the tiles change
// only the order the MLP adapters' gradients are summed in).
//
// The rows are documents of --document tokens packed into rows of --tokens (TRL's bfd packing,
// padding-free: the attention keeps each document to itself, as packed fine-tuning does); the
// memory of a row is that of --tokens tokens whatever the documents (the attention keeps no
// T x T matrix), while its FLOPs grow with --document. --document equal to --tokens trains one
// sequence of that length (slow on two cores: 32k tokens is about 10 minutes a step).
//
// Run (Release build):
//   ninja -C build long_context && build/bench/long_context [--tokens 32768] [--document 4096]
//       [--hidden 768] [--layers 12] [--intermediate 2816] [--steps 2] [--modes all|issue]
// --modes issue runs the untiled run, offload alone and the tiled MLP with offload (the issue's
// configuration), leaving out the tiled MLP alone.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include "bench_support.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "memory/device_memory.h"
#include "memory/host_pool.h"
#include "plan/dry_run.h"
#include "train/trainer.h"

namespace {

using namespace headroom;
using Clock = std::chrono::steady_clock;

constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  int64_t tokens = 32768, document = 4096, hidden = 768, layers = 12, intermediate = 2816;
  int64_t steps = 2;
  std::string modes = "all";
};

struct Mode {
  const char* name;
  std::function<void(TrainingArguments&)> enable;
};

struct Figures {
  double step_seconds = 0.0;
  int64_t device_peak = 0, host_peak = 0;
  std::vector<double> losses;
};

std::string format_loss(double loss) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.9g", loss);
  return text;
}

Figures measure(const TrainingArguments& args) {
  empty_cache(kCPU);
  host_pool(kCPU).empty_cache();
  Trainer trainer(args);
  // The Trainer's own report (progress, memory summary) would bury the table: stdout is quieted
  // for the run.
  std::fflush(stdout);
  const int saved = dup(STDOUT_FILENO);
  const int null = open("/dev/null", O_WRONLY);
  dup2(null, STDOUT_FILENO);
  close(null);
  const int status = trainer.train();
  std::fflush(stdout);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  if (status != 0) throw Error("long_context: the run failed");
  Figures f;
  std::vector<double> times;
  const auto tokens = static_cast<double>(args.max_seq_length.value_or(0));
  for (const auto& entry : trainer.log_history()) {
    if (!entry.contains("loss") || !entry.contains("peak_allocated_bytes")) continue;
    f.losses.push_back(entry["loss"].get<double>());
    times.push_back(tokens / entry["tokens_per_s"].get<double>());
    f.device_peak = entry["peak_allocated_bytes"].get<int64_t>();
    if (entry.contains("host_peak_allocated_bytes")) {
      f.host_peak = entry["host_peak_allocated_bytes"].get<int64_t>();
    }
  }
  // The first step builds the optimizer's states: timed from the second on when there is one.
  if (times.size() > 1) times.erase(times.begin());
  f.step_seconds = times.empty() ? 0.0 : bench::median(times);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bench::parse_command_line(
      "long_context",
      "[--tokens N] [--document N] [--hidden N] [--layers N] [--intermediate N] [--steps N] "
      "[--modes all|issue]",
      argc, argv, {}, {{"--modes", &o.modes}},
      {{"--tokens", &o.tokens},
       {"--document", &o.document},
       {"--hidden", &o.hidden},
       {"--layers", &o.layers},
       {"--intermediate", &o.intermediate},
       {"--steps", &o.steps}});
  if (o.document < 1 || o.tokens % o.document != 0 || o.steps < 1 ||
      (o.modes != "all" && o.modes != "issue")) {
    std::fprintf(stderr,
                 "long_context: --document must divide --tokens, --steps be positive and --modes "
                 "all or issue\n");
    return 2;
  }
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("headroom_long_context_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(root / "model");
  LlamaConfig config;
  config.vocab_size = 256;  // the byte tokenizer's: one token a byte, no EOS appended
  config.hidden_size = o.hidden;
  config.intermediate_size = o.intermediate;
  config.num_hidden_layers = o.layers;
  config.num_attention_heads = std::max<int64_t>(1, o.hidden / 64);
  config.num_key_value_heads = std::max<int64_t>(1, config.num_attention_heads / 3);
  config.max_position_embeddings = o.tokens;
  config.bos_token_id = std::nullopt;
  config.eos_token_id = {};
  write_hf_config((root / "model").string(), config);
  {
    // Documents of exactly --document bytes, enough rows for every step.
    std::ofstream rows((root / "rows.jsonl").string());
    const int64_t documents = (o.steps + 1) * (o.tokens / o.document);
    for (int64_t d = 0; d < documents; ++d) {
      std::string text;
      for (int64_t i = 0; i < o.document; ++i) {
        text += static_cast<char>('a' + (i * 2654435761u + d * 40503u) % 26);
      }
      rows << "{\"text\": \"" << text << "\"}\n";
    }
  }
  TrainingArguments args;
  args.model = (root / "model").string();
  args.data = (root / "rows.jsonl").string();
  args.output_dir = (root / "out").string();
  args.device = "cpu";
  args.bf16 = true;
  args.max_seq_length = o.tokens;
  args.packing = true;  // bfd: padding-free rows of whole documents
  args.per_device_train_batch_size = 1;
  args.validation_split_percentage = 0;
  args.use_peft = args.load_in_4bit = true;
  args.bnb_4bit_quant_type = "nf4";
  args.lora_r = 16;
  args.lora_dropout = 0.0;
  args.lora_target_modules = "all-linear";
  args.gradient_checkpointing = true;
  args.learning_rate = 1e-4;
  args.logging_steps = 1;
  args.disable_tqdm = true;
  args.save_strategy = "no";
  args.eval_strategy = "no";
  args.sample_max_new_tokens = 0;
  args.max_steps = o.steps;

  std::vector<Mode> modes = {
      {"untiled", [](TrainingArguments&) {}},
      {"tiled MLP", [](TrainingArguments& a) { a.tiled_mlp = true; }},
      {"offload", [](TrainingArguments& a) { a.offload_activations = true; }},
      {"tiled MLP + offload",
       [](TrainingArguments& a) { a.tiled_mlp = a.offload_activations = true; }},
  };
  if (o.modes == "issue") modes = {modes[0], modes[2], modes[3]};
  int64_t parameters = 0;
  {
    const DryRunResult plan = dry_run_training(args, {.steps = 1});
    parameters = plan.num_parameters;
  }
  std::printf(
      "long-context bench: Llama %lld layers x %lld wide (intermediate %lld, %.1fM parameters), "
      "QLoRA NF4 r 16 all-linear, bf16, checkpointing full; rows of %lld tokens (documents of "
      "%lld packed); median of %lld step(s)%s, on the CPU (%d threads)\n",
      static_cast<long long>(o.layers), static_cast<long long>(o.hidden),
      static_cast<long long>(o.intermediate), static_cast<double>(parameters) / 1e6,
      static_cast<long long>(o.tokens), static_cast<long long>(o.document),
      static_cast<long long>(o.steps > 1 ? o.steps - 1 : 1), o.steps > 1 ? " after the first" : "",
      omp_get_max_threads());
  std::printf("%-22s %9s %9s %8s %14s %14s %14s %14s %10s %s\n", "mode", "step s", "tokens/s",
              "cost", "device MiB", "plan MiB", "host MiB", "plan MiB", "RSS MiB", "losses");
  double baseline = 0.0;
  std::vector<double> first_losses;
  bool all_equal = true;
  for (const Mode& mode : modes) {
    TrainingArguments a = args;
    mode.enable(a);
    const DryRunResult plan = dry_run_training(a);
    const Figures f = measure(a);
    if (baseline == 0.0) baseline = f.step_seconds;
    if (first_losses.empty()) first_losses = f.losses;
    const bool planned =
        f.device_peak == plan.peak_allocated_bytes && f.host_peak == plan.host_peak_allocated_bytes;
    all_equal = all_equal && planned;
    std::string losses;
    for (size_t i = 0; i < f.losses.size(); ++i) {
      const bool same = i < first_losses.size() && f.losses[i] == first_losses[i];
      losses += str_cat(i ? " " : "", format_loss(f.losses[i]), same ? "=" : "~");
    }
    std::printf("%-22s %9.2f %9.0f %7.1f%% %14.2f %14.2f %14.2f %14.2f %10.1f %s%s\n", mode.name,
                f.step_seconds, static_cast<double>(o.tokens) / f.step_seconds,
                100.0 * (f.step_seconds / baseline - 1.0),
                static_cast<double>(f.device_peak) / kMiB,
                static_cast<double>(plan.peak_allocated_bytes) / kMiB,
                static_cast<double>(f.host_peak) / kMiB,
                static_cast<double>(plan.host_peak_allocated_bytes) / kMiB,
                static_cast<double>(bench::peak_rss()) / kMiB, losses.c_str(),
                planned ? "" : "  (peaks differ from the plan)");
    std::fflush(stdout);
  }
  std::printf(
      "device and host peaks %s the plans to the byte; '=' marks a loss equal to the "
      "first mode's bit for bit, '~' one that is not; RSS is the process's peak so far\n",
      all_equal ? "equal" : "do NOT all equal");
  std::filesystem::remove_all(root);
  return all_equal ? 0 : 1;
}

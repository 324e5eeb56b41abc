// Long context: a Llama-shaped model of about 100M parameters (or --model PRESET), QLoRA (NF4 base,
// LoRA r 16 on all linear layers), bf16 autocast and full checkpointing, trained with the Trainer
// on rows of --tokens tokens, with and without the tiled MLP and offloaded checkpoint inputs, side
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
//       [--device cpu|cuda] [--model PRESET]
// --modes issue runs the untiled run, offload alone and the tiled MLP with offload (the issue's
// configuration), leaving out the tiled MLP alone. --model takes a Llama-family preset's shape
// (llama-3.2-1b) instead of --hidden, --layers and --intermediate.
// On a GPU (--device cuda) offloaded checkpoint inputs cross on the copy stream while the
// compute stream works (Note [Offload on the copy stream]); the table adds what their copies
// would cost done one after the other (2 x the host peak, out and back, at the page-locked
// bandwidth measured after the runs) and how much of it the step hides: 1 - (the step's extra
// time over the same mode without offload) / that serial time.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include "autograd/engine.h"
#include "bench_support.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "memory/device_memory.h"
#include "memory/host_pool.h"
#include "nn/model_presets.h"
#include "ops/ops.h"
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
  std::string device = "cpu";
  std::string model;  // a Llama-family preset; empty: the sizes above
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
  const Device device = Device::parse(args.device);
  empty_cache(device);
  for (bool pinned : {false, true}) host_pool(device, pinned).empty_cache();
  // What the process keeps before the run (a GPU's GEMM workspace) is not the plan's.
  const auto resident = static_cast<int64_t>(memory_allocated(device));
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
    f.device_peak = entry["peak_allocated_bytes"].get<int64_t>() - resident;
    if (entry.contains("host_peak_allocated_bytes")) {
      f.host_peak = entry["host_peak_allocated_bytes"].get<int64_t>();
    }
  }
  // The first step builds the optimizer's states: timed from the second on when there is one.
  if (times.size() > 1) times.erase(times.begin());
  f.step_seconds = times.empty() ? 0.0 : bench::median(times);
  return f;
}

// Seconds for one copy of `bytes` from the device to page-locked host memory and one back
// (copy_ synchronises), the faster of three; 0 on the CPU, where nothing crosses.
std::pair<double, double> pinned_copy_seconds(Device device, int64_t bytes) {
  if (!device.is_cuda()) return {0.0, 0.0};
  const Tensor on_device = Tensor::zeros({bytes / 4}, DType::f32, device);
  CachingAllocator& pool = host_pool(device, true);
  Tensor on_host;
  {
    HostPoolScope scope(device, pool);
    on_host = Tensor::zeros({bytes / 4}, DType::f32, host_pool_device(device));
  }
  double out = 1e30, in = 1e30;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    on_host.copy_(on_device);
    out = std::min(out, std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
    on_device.copy_(on_host);
    in = std::min(in, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return {out, in};
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bench::parse_command_line(
      "long_context",
      "[--tokens N] [--document N] [--hidden N] [--layers N] [--intermediate N] [--steps N] "
      "[--modes all|issue] [--device cpu|cuda] [--model PRESET]",
      argc, argv, {}, {{"--modes", &o.modes}, {"--device", &o.device}, {"--model", &o.model}},
      {{"--tokens", &o.tokens},
       {"--document", &o.document},
       {"--hidden", &o.hidden},
       {"--layers", &o.layers},
       {"--intermediate", &o.intermediate},
       {"--steps", &o.steps}});
  if (o.document < 1 || o.tokens % o.document != 0 || o.steps < 1 ||
      (o.modes != "all" && o.modes != "issue") || (o.device != "cpu" && o.device != "cuda")) {
    std::fprintf(stderr,
                 "long_context: --document must divide --tokens, --steps be positive, --modes "
                 "all or issue and --device cpu or cuda\n");
    return 2;
  }
  if (o.device == "cuda" && !cuda_is_available()) {
    std::printf("long_context: no CUDA device present; nothing to measure\n");
    return 0;
  }
  const Device device = Device::parse(o.device == "cuda" ? "cuda:0" : "cpu");
  if (device.is_cuda()) {
    // cuBLASLt's workspace, which the process keeps from its first GEMM on (the plan counts it
    // in the CUDA overhead, not in the run's peak), made before any run is measured.
    for (DType dtype : {DType::f32, DType::bf16}) {
      const Tensor x = Tensor::ones({8, 64}, dtype, device).set_requires_grad(true);
      const Tensor w = Tensor::ones({32, 64}, dtype, device).set_requires_grad(true);
      backward(sum(linear(x, w)));
    }
  }
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("headroom_long_context_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(root / "model");
  LlamaConfig config;
  if (!o.model.empty()) {
    const HfConfig preset = model_preset(o.model);
    if (!std::holds_alternative<LlamaConfig>(preset)) {
      std::fprintf(stderr, "long_context: --model takes a Llama-family preset\n");
      return 2;
    }
    config = std::get<LlamaConfig>(preset);  // its vocabulary: the bytes are its first 256 ids
    o.hidden = config.hidden_size, o.layers = config.num_hidden_layers;
    o.intermediate = config.intermediate_size;
  } else {
    config.vocab_size = 256;  // the byte tokenizer's: one token a byte, no EOS appended
    config.hidden_size = o.hidden;
    config.intermediate_size = o.intermediate;
    config.num_hidden_layers = o.layers;
    config.num_attention_heads = std::max<int64_t>(1, o.hidden / 64);
    config.num_key_value_heads = std::max<int64_t>(1, config.num_attention_heads / 3);
    config.max_position_embeddings = o.tokens;
  }
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
  args.device = device.str();
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
      "%lld packed); median of %lld step(s)%s, on %s\n",
      static_cast<long long>(o.layers), static_cast<long long>(o.hidden),
      static_cast<long long>(o.intermediate), static_cast<double>(parameters) / 1e6,
      static_cast<long long>(o.tokens), static_cast<long long>(o.document),
      static_cast<long long>(o.steps > 1 ? o.steps - 1 : 1), o.steps > 1 ? " after the first" : "",
      device.is_cuda() ? "cuda:0"
                       : str_cat("the CPU (", omp_get_max_threads(), " threads)").c_str());
  std::printf("%-22s %9s %9s %8s %14s %14s %14s %14s %10s %s\n", "mode", "step s", "tokens/s",
              "cost", "device MiB", "plan MiB", "host MiB", "plan MiB", "RSS MiB", "losses");
  double baseline = 0.0;
  std::vector<double> first_losses;
  std::map<std::string, Figures> figures;
  bool all_equal = true;
  for (const Mode& mode : modes) {
    TrainingArguments a = args;
    mode.enable(a);
    const DryRunResult plan = dry_run_training(a);
    const Figures f = measure(a);
    figures[mode.name] = f;
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
  if (device.is_cuda()) {
    // The overlap: each offload mode against the same mode without offload.
    const auto [out_s, in_s] = pinned_copy_seconds(device, int64_t{256} << 20);
    const double bytes = 256.0 * kMiB;
    std::printf(
        "\npage-locked copies of 256 MiB: %.1f GB/s to the host, %.1f GB/s back\n"
        "%-22s %12s %14s %16s %10s\n",
        bytes / out_s / 1e9, bytes / in_s / 1e9, "offload mode", "extra s", "host MiB",
        "serial copies s", "hidden");
    for (const auto& [with, without] : {std::pair<const char*, const char*>{"offload", "untiled"},
                                        {"tiled MLP + offload", "tiled MLP"}}) {
      if (!figures.count(with) || !figures.count(without)) continue;
      const Figures& f = figures[with];
      const double extra = f.step_seconds - figures[without].step_seconds;
      const double serial = static_cast<double>(f.host_peak) / bytes * (out_s + in_s);
      std::printf("%-22s %12.3f %14.1f %16.3f %9.0f%%\n", with, extra,
                  static_cast<double>(f.host_peak) / kMiB, serial,
                  serial > 0.0 ? 100.0 * (1.0 - extra / serial) : 0.0);
    }
  }
  std::filesystem::remove_all(root);
  return all_equal ? 0 : 1;
}

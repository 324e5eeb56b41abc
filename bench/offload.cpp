// Offload's cost on this machine: the same GPT-2-shaped model trained with the Trainer without
// offload and with each kind (the optimizer, the saved activations, the parameters, all), side by
// side from one run: the median step time and its overhead over no offload, the device pool's and
// the host pool's peak allocated. On a machine without a GPU the compute device is the CPU and the
// host pool a second allocator over CPU memory (Note [The host pool]), so the figures give the cost
// of the moves and of the host-side step, not of a PCIe link.
//
// Run (Release build):
//   ninja -C build offload && build/bench/offload [--layers 4] [--width 512] [--context 256]
//       [--batch 8] [--steps 8] [--precision bf16] [--checkpointing]
// The first 2 steps are warm-up and not timed; AdamW, lr 1e-4; byte-level vocabulary.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench_support.h"
#include "io/hf_config.h"
#include "memory/device_memory.h"
#include "memory/host_pool.h"
#include "train/trainer.h"

namespace {

using namespace headroom;
using Clock = std::chrono::steady_clock;

constexpr int kWarmupSteps = 2;
constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  int64_t layers = 4, width = 512, context = 256, batch = 8, steps = 8;
  std::string precision = "bf16";
  bool checkpointing = false;
};

struct Mode {
  const char* name;
  std::function<void(TrainingArguments&)> enable;
};

struct Figures {
  double step_seconds = 0.0;
  int64_t device_peak = 0, host_peak = 0;
};

Figures measure(TrainingArguments args, const Options& o) {
  empty_cache(kCPU);
  host_pool(kCPU).empty_cache();
  Trainer trainer(args);
  std::vector<double> times;
  for (int64_t step = 0; step < o.steps; ++step) {
    if (step == kWarmupSteps) {
      reset_peak_memory_stats(kCPU);
      host_pool(kCPU).reset_peak_stats();
    }
    const auto start = Clock::now();
    trainer.step();
    if (step >= kWarmupSteps) {
      times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  Figures f;
  f.step_seconds = bench::median(times);
  f.device_peak = static_cast<int64_t>(max_memory_allocated(kCPU));
  const DeviceStats host = host_pool(kCPU).stats();
  f.host_peak = host.allocated_bytes[static_cast<size_t>(StatType::all)].peak;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bench::parse_command_line(
      "offload",
      "[--layers N] [--width N] [--context N] [--batch N] [--steps N] [--precision P] "
      "[--checkpointing]",
      argc, argv, {{"--checkpointing", &o.checkpointing}}, {{"--precision", &o.precision}},
      {{"--layers", &o.layers},
       {"--width", &o.width},
       {"--context", &o.context},
       {"--batch", &o.batch},
       {"--steps", &o.steps}});
  if (o.steps <= kWarmupSteps) {
    std::fprintf(stderr, "offload: --steps must exceed the %d warm-up steps\n", kWarmupSteps);
    return 2;
  }
  const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                     ("headroom_offload_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(root / "model");
  GPT2Config config;
  config.vocab_size = 256;
  config.n_positions = o.context;
  config.n_embd = o.width;
  config.n_layer = o.layers;
  config.n_head = std::max<int64_t>(1, o.width / 64);
  config.bos_token_id = std::nullopt;
  config.eos_token_id = {};
  write_hf_config((root / "model").string(), config);
  {
    // Bytes that are not all alike, enough for the steps.
    std::ofstream text((root / "data.txt").string());
    for (int64_t i = 0; i < (o.steps + 2) * o.batch * (o.context + 1) / 16 + 64; ++i) {
      text << "offload bench line " << (i * 2654435761u % 100003) << " of text\n";
    }
  }
  TrainingArguments args;
  args.model = (root / "model").string();
  args.data = (root / "data.txt").string();
  args.output_dir = (root / "out").string();
  args.device = "cpu";
  args.precision = o.precision;
  args.max_seq_length = o.context;
  args.per_device_train_batch_size = o.batch;
  args.learning_rate = 1e-4;
  args.gradient_checkpointing = o.checkpointing;
  args.disable_tqdm = true;
  args.save_strategy = "no";
  args.eval_strategy = "no";
  args.sample_max_new_tokens = 0;
  args.max_steps = o.steps;

  const std::vector<Mode> modes = {
      {"none", [](TrainingArguments&) {}},
      {"optimizer", [](TrainingArguments& a) { a.offload_optimizer = true; }},
      {"activations", [](TrainingArguments& a) { a.offload_activations = true; }},
      {"optimizer+activations",
       [](TrainingArguments& a) { a.offload_optimizer = a.offload_activations = true; }},
      {"params (+optimizer)", [](TrainingArguments& a) { a.offload_params = true; }},
      {"all three",
       [](TrainingArguments& a) {
         a.offload_optimizer = a.offload_activations = a.offload_params = true;
       }},
  };
  std::printf(
      "offload bench: GPT-2 %lld layers x %lld wide, batch %lld x %lld tokens, %s, "
      "checkpointing %s, AdamW; median of %lld steps after %d warm-up, on the CPU\n",
      static_cast<long long>(o.layers), static_cast<long long>(o.width),
      static_cast<long long>(o.batch), static_cast<long long>(o.context), o.precision.c_str(),
      o.checkpointing ? "full" : "none", static_cast<long long>(o.steps - kWarmupSteps),
      kWarmupSteps);
  std::printf("%-24s %10s %10s %16s %16s\n", "offload", "step s", "overhead", "device peak MiB",
              "host peak MiB");
  double baseline = 0.0;
  for (const Mode& mode : modes) {
    TrainingArguments a = args;
    mode.enable(a);
    const Figures f = measure(a, o);
    if (baseline == 0.0) baseline = f.step_seconds;
    std::printf("%-24s %10.4f %9.1f%% %16.2f %16.2f\n", mode.name, f.step_seconds,
                100.0 * (f.step_seconds / baseline - 1.0),
                static_cast<double>(f.device_peak) / kMiB, static_cast<double>(f.host_peak) / kMiB);
    std::fflush(stdout);
  }
  std::filesystem::remove_all(root);
  return 0;
}

// A training step of a preset model (Qwen2.5-0.5B by default) on the CPU, beside transformers'
// model of the same config.json on current PyTorch, eager and under torch.compile
// (bench/model_step_peer.py, each mode in its own process): the same batches, AdamW, thread
// count; tokens/s, the step's median, peak memory and the first and last losses from one run.
//
// Run (Release build):
//   ninja -C build model_step && build/bench/model_step [--model qwen2.5-0.5b] [--context 512]
//       [--batch 1] [--steps 3] [--precision fp32|bf16] [--python /work/venv/bin/python]
//       [--no-peer]
// The first step is warm-up and not timed (on both sides: torch.compile compiles there). The
// peer needs a Python with torch and transformers (--python; default: the one tools/ uses,
// python3 on the PATH); headroom's memory is its allocator's peak and RSS growth, the peer's RSS
// growth (PyTorch's CPU allocator keeps no statistics).
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/precision.h"
#include "autograd/engine.h"
#include "bench_support.h"
#include "core/error.h"
#include "io/hf_config.h"
#include "memory/device_memory.h"
#include "nn/causal_lm.h"
#include "nn/model_presets.h"
#include "optim/adamw.h"

namespace {

using namespace headroom;
using Clock = std::chrono::steady_clock;

constexpr int kWarmupSteps = 1;
constexpr uint64_t kSeed = 1234;
constexpr double kLr = 1e-4;
constexpr double kWeightDecay = 0.1;
constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  std::string model = "qwen2.5-0.5b";
  int64_t context = 512, batch = 1, steps = 3;
  std::string precision = "fp32";
  std::string python = "python3";
  bool no_peer = false;
};

struct Result {
  double step_ms = 0, tokens_per_s = 0;
  double memory_bytes = 0;  // headroom: peak allocated growth; peer: peak RSS growth
  double rss_growth = 0;
  double first_loss = 0, last_loss = 0;
};

Result run_headroom(const Options& o, const HfConfig& config,
                    const std::vector<std::vector<int64_t>>& batches) {
  const PrecisionRecipe recipe = parse_precision(o.precision);
  std::unique_ptr<CausalLM> model = make_causal_lm(config, kCPU, kSeed);
  model->to(recipe.param_dtype);
  model->train();
  AdamW optimizer(
      weight_decay_param_groups(model->named_parameters(), kWeightDecay),
      AdamWOptions{
          .lr = kLr, .weight_decay = kWeightDecay, .state_dtype = recipe.optimizer_state_dtype});
  std::printf("headroom: %s, %.1fM parameters, %s, batch %lld x %lld, %d threads\n",
              o.model.c_str(), static_cast<double>(model->num_parameters()) / 1e6,
              recipe.name().c_str(), static_cast<long long>(o.batch),
              static_cast<long long>(o.context), omp_get_max_threads());
  const size_t allocated_before = memory_allocated(kCPU);
  const size_t rss_before = bench::current_rss();
  reset_peak_memory_stats(kCPU);
  std::vector<double> times;
  Result r;
  for (size_t step = 0; step < batches.size(); ++step) {
    const Tensor tokens = Tensor::from_ints(batches[step], {o.batch, o.context + 1});
    const Tensor input_ids = tokens.narrow(1, 0, o.context).contiguous();
    const Tensor targets = tokens.narrow(1, 1, o.context).contiguous();
    const auto start = Clock::now();
    Tensor loss;
    {
      std::optional<Autocast> region;
      if (recipe.autocast_dtype) region.emplace(DeviceType::cpu, recipe.autocast_dtype);
      loss = model->loss(input_ids, targets);
    }
    backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const double value = loss.item();
    if (step == 0) r.first_loss = value;
    r.last_loss = value;
    const bool warm = step < static_cast<size_t>(kWarmupSteps);
    std::printf("headroom: step %2zu%s loss %.4f  %8.1f ms\n", step, warm ? " warm-up" : "        ",
                value, seconds * 1e3);
    std::fflush(stdout);
    if (!warm) times.push_back(seconds);
  }
  r.step_ms = bench::median(times) * 1e3;
  r.tokens_per_s = static_cast<double>(o.batch * o.context) / bench::median(times);
  r.memory_bytes = static_cast<double>(max_memory_allocated(kCPU) - allocated_before);
  r.rss_growth = static_cast<double>(bench::peak_rss() - std::min(bench::peak_rss(), rss_before));
  return r;
}

std::optional<Result> run_peer(const Options& o, const std::string& mode,
                               const std::filesystem::path& dir, std::string& versions) {
  const std::filesystem::path script =
      std::filesystem::path(HEADROOM_SOURCE_DIR) / "bench" / "model_step_peer.py";
  const std::string threads = std::to_string(omp_get_max_threads());
  setenv("OMP_NUM_THREADS", threads.c_str(), 1);
  const std::string command = str_cat(
      o.python, " ", script.string(), " --model-dir ", (dir / "model").string(), " --batches ",
      (dir / "batches.json").string(), " --warmup ", kWarmupSteps, " --threads ", threads, " --lr ",
      kLr, " --weight-decay ", kWeightDecay, " --precision ", o.precision, " --modes ", mode);
  int status = 0;
  const auto results = bench::run_peer_command(command, status);
  if (status != 0 || results.empty() || !results.back().count("step_ms")) {
    std::printf("peer %s: no result (exit status %d)\n", mode.c_str(), status);
    return std::nullopt;
  }
  const auto& f = results.back();
  versions = str_cat("torch ", f.at("torch"), ", transformers ", f.at("transformers"));
  Result r;
  r.step_ms = std::stod(f.at("step_ms"));
  r.tokens_per_s = std::stod(f.at("tokens_per_s"));
  r.rss_growth = r.memory_bytes = std::stod(f.at("rss_growth"));
  r.first_loss = std::stod(f.at("first_loss"));
  r.last_loss = std::stod(f.at("last_loss"));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bench::parse_command_line(
      "model_step",
      "[--model PRESET] [--context N] [--batch N] [--steps N] [--precision fp32|bf16] "
      "[--python PATH] [--no-peer]",
      argc, argv, {{"--no-peer", &o.no_peer}},
      {{"--model", &o.model}, {"--precision", &o.precision}, {"--python", &o.python}},
      {{"--context", &o.context}, {"--batch", &o.batch}, {"--steps", &o.steps}});
  if (o.precision != "fp32" && o.precision != "bf16") {
    std::fprintf(stderr, "model_step: --precision is fp32 or bf16 (what both sides run)\n");
    return 2;
  }
  const HfConfig config = model_preset(o.model);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("headroom_model_step_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "model");
  write_hf_config((dir / "model").string(), config);
  std::vector<std::vector<int64_t>> batches;
  {
    std::ofstream json((dir / "batches.json").string());
    json << "[";
    for (int64_t step = 0; step < kWarmupSteps + o.steps; ++step) {
      batches.push_back(bench::batch_tokens(kSeed, o.batch, o.context, vocab_size(config), step));
      json << (step ? "," : "") << "[";
      for (int64_t row = 0; row < o.batch; ++row) {
        json << (row ? "," : "") << "[";
        for (int64_t i = 0; i <= o.context; ++i) {
          json << (i ? "," : "") << batches.back()[static_cast<size_t>(row * (o.context + 1) + i)];
        }
        json << "]";
      }
      json << "]";
    }
    json << "]";
  }
  const Result ours = run_headroom(o, config, batches);
  std::map<std::string, Result> peers;
  std::string versions = "peer skipped";
  if (!o.no_peer) {
    for (const char* mode : {"eager", "compile"}) {
      if (auto r = run_peer(o, mode, dir, versions)) peers[mode] = *r;
    }
  }
  std::filesystem::remove_all(dir);

  std::printf(
      "\n%s, batch %lld x %lld, %s, AdamW, %d threads; median of %lld steps after %d "
      "warm-up (%s)\n",
      o.model.c_str(), static_cast<long long>(o.batch), static_cast<long long>(o.context),
      o.precision.c_str(), omp_get_max_threads(), static_cast<long long>(o.steps), kWarmupSteps,
      versions.c_str());
  std::printf("%-22s %12s %12s %16s %12s %12s\n", "", "tokens/s", "step ms", "memory MiB",
              "first loss", "last loss");
  auto row = [](const char* name, const Result& r, const char* memory) {
    std::printf("%-22s %12.1f %12.1f %10.1f %-5s %12.4f %12.4f\n", name, r.tokens_per_s, r.step_ms,
                r.memory_bytes / kMiB, memory, r.first_loss, r.last_loss);
  };
  row("headroom", ours, "alloc");
  std::printf("%-22s %12s %12s %10.1f %-5s\n", "", "", "", ours.rss_growth / kMiB, "RSS");
  for (const auto& [mode, r] : peers) {
    row(str_cat("transformers ", mode).c_str(), r, "RSS");
    std::printf("%-22s %12.2fx\n", str_cat("  headroom / ", mode).c_str(),
                ours.tokens_per_s / r.tokens_per_s);
  }
  return 0;
}

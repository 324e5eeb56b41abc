// Training-step throughput and peak memory of a GPT-2-shaped model (fp32 and AdamW by default,
// CPU), printed side by side with the same model in plain PyTorch (bench/train_step_peer.py) on
// this machine.
//
// Run (Release build):
//   ninja -C build train_step && build/bench/train_step [--layers 6] [--d-model 384] [--heads 6]
//       [--context 256] [--batch 8] [--vocab 50304] [--steps 10] [--threads N] [--no-peer]
//       [--precision fp32|bf16|pure_bf16|pure_bf16+kahan] [--optim NAME]
// --precision applies a recipe of amp/precision.h (fp16 needs loss scaling: bench/precision has
// it); pure_bf16 times the optimizer on bf16 parameters, gradients and states. --optim takes the
// trainer's names (optim/optimizer_factory.h: lion, sgd, adafactor, lomo, ...); the peer runs
// AdamW only, so it is skipped for another optimizer.
// The first 2 steps are warm-up and not timed. --threads defaults to OMP_NUM_THREADS, else all
// cores; the peer gets the same count (torch.set_num_threads and OPENBLAS_NUM_THREADS). The peer
// runs when /usr/bin/python3 imports torch. For a profile: DNNL_JIT_PROFILE=2 perf record -g
// build/bench/train_step --no-peer, then perf report --no-children --sort dso,sym (the variable
// makes oneDNN write /tmp/perf-PID.map, so its JIT GEMM kernels get names instead of addresses).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/precision.h"
#include "autograd/engine.h"
#include "bench_support.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "memory/device_memory.h"
#include "nn/causal_lm.h"
#include "ops/linear.h"
#include "optim/adamw.h"
#include "optim/optimizer_factory.h"

namespace {

using namespace headroom;
using Clock = std::chrono::steady_clock;
using bench::current_rss;
using bench::median;
using bench::peak_rss;

constexpr int kWarmupSteps = 2;
constexpr uint64_t kSeed = 1234;
constexpr double kLr = 1e-4;
constexpr double kWeightDecay = 0.1;
constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  int64_t layers = 6;
  int64_t d_model = 384;
  int64_t heads = 6;
  int64_t context = 256;
  int64_t batch = 8;
  int64_t vocab = 50304;
  int64_t steps = 10;
  int64_t threads = 0;  // 0: OpenMP's default (OMP_NUM_THREADS, else all cores)
  bool peer = true;
  std::string precision = "fp32";
  std::string optim = "";  // empty: AdamW as the peer runs it
};

Options parse_options(int argc, char** argv) {
  Options o;
  bool no_peer = false;
  bench::parse_command_line(
      "train_step",
      "[--layers N] [--d-model N] [--heads N] [--context N] [--batch N] [--vocab N] [--steps N] "
      "[--threads N] [--no-peer] [--precision fp32|bf16|pure_bf16|pure_bf16+kahan] "
      "[--optim NAME]",
      argc, argv, {{"--no-peer", &no_peer}}, {{"--precision", &o.precision}, {"--optim", &o.optim}},
      {{"--layers", &o.layers},
       {"--d-model", &o.d_model},
       {"--heads", &o.heads},
       {"--context", &o.context},
       {"--batch", &o.batch},
       {"--vocab", &o.vocab},
       {"--steps", &o.steps},
       {"--threads", &o.threads}});
  o.peer = !no_peer && o.optim.empty();
  return o;
}

std::vector<int64_t> batch_tokens(const Options& o, int64_t step) {
  return bench::batch_tokens(kSeed, o.batch, o.context, o.vocab, step);
}

// GFLOP/s of a 1024^3 matmul, the check the peer makes of PyTorch's BLAS.
double matmul_gflops() {
  NoGradGuard no_grad;
  const Tensor a = Tensor::randn({1024, 1024});
  const Tensor b = Tensor::randn({1024, 1024});
  matmul(a, b);
  const int reps = 10;
  const auto start = Clock::now();
  for (int r = 0; r < reps; ++r) matmul(a, b);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return 2.0 * 1024 * 1024 * 1024 * reps / seconds / 1e9;
}

struct Result {
  double tokens_per_s = 0;
  double step_ms = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double allocated_growth = 0;  // peak allocated bytes above those held before the first step
  double rss_growth = 0;        // peak RSS above the RSS before the first step
  double gflops = 0;
  double first_loss = 0, last_loss = 0;
};

Result run_headroom(const Options& o) {
  const GPT2Config config = bench::gpt2_config(o.layers, o.d_model, o.heads, o.context, o.vocab);

  Result r;
  r.gflops = matmul_gflops();
  const PrecisionRecipe recipe = parse_precision(o.precision);
  if (recipe.loss_scaling) {
    throw ValueError(str_cat("--precision ", o.precision,
                             " needs loss scaling, which bench/precision runs; train_step takes "
                             "fp32, bf16, pure_bf16 or pure_bf16+kahan"));
  }
  std::unique_ptr<CausalLM> model = make_causal_lm(config, kCPU, kSeed);
  model->to(recipe.param_dtype);
  model->train();
  std::unique_ptr<Optimizer> optimizer;
  if (o.optim.empty()) {
    optimizer =
        std::make_unique<AdamW>(weight_decay_param_groups(model->named_parameters(), kWeightDecay),
                                AdamWOptions{.lr = kLr,
                                             .weight_decay = kWeightDecay,
                                             .state_dtype = recipe.optimizer_state_dtype,
                                             .kahan_summation = recipe.kahan_summation,
                                             .stochastic_rounding = recipe.stochastic_rounding});
  } else {
    optimizer = make_optimizer({.optim = o.optim,
                                .learning_rate = kLr,
                                .weight_decay = kWeightDecay,
                                .kahan_summation = recipe.kahan_summation,
                                .seed = kSeed},
                               model->named_parameters());
  }
  std::printf(
      "headroom: GPT-2 %lld layers, d_model %lld, %lld heads, context %lld, batch %lld, "
      "vocab %lld: %.2fM parameters, precision %s, %s; %d threads; 1024^3 matmul "
      "%.1f GFLOP/s\n",
      static_cast<long long>(o.layers), static_cast<long long>(o.d_model),
      static_cast<long long>(o.heads), static_cast<long long>(o.context),
      static_cast<long long>(o.batch), static_cast<long long>(o.vocab),
      static_cast<double>(model->num_parameters()) / 1e6, recipe.name().c_str(),
      optimizer->name().c_str(), omp_get_max_threads(), r.gflops);

  const size_t allocated_before = memory_allocated(kCPU);
  const size_t rss_before = current_rss();
  reset_peak_memory_stats(kCPU);
  std::vector<double> step_s, forward_s, backward_s, optimizer_s;
  for (int64_t step = 0; step < kWarmupSteps + o.steps; ++step) {
    const Tensor tokens = Tensor::from_ints(batch_tokens(o, step), {o.batch, o.context + 1});
    const Tensor input_ids = tokens.narrow(1, 0, o.context).contiguous();
    const Tensor targets = tokens.narrow(1, 1, o.context).contiguous();
    const auto t0 = Clock::now();
    Tensor loss;
    {
      std::optional<Autocast> region;
      if (recipe.autocast_dtype) region.emplace(DeviceType::cpu, recipe.autocast_dtype);
      loss = model->loss(input_ids, targets);
    }
    const auto t1 = Clock::now();
    backward(loss);
    const auto t2 = Clock::now();
    optimizer->step();
    optimizer->zero_grad();
    const auto t3 = Clock::now();
    const double f = std::chrono::duration<double>(t1 - t0).count();
    const double b = std::chrono::duration<double>(t2 - t1).count();
    const double u = std::chrono::duration<double>(t3 - t2).count();
    const double value = loss.item();
    if (step == 0) r.first_loss = value;
    r.last_loss = value;
    const bool timed = step >= kWarmupSteps;
    std::printf(
        "headroom: step %2lld%s loss %.4f  %8.1f ms (forward %.1f, backward %.1f, "
        "optimizer %.1f)\n",
        static_cast<long long>(step), timed ? "        " : " warm-up", value, (f + b + u) * 1e3,
        f * 1e3, b * 1e3, u * 1e3);
    if (!timed) continue;
    step_s.push_back(f + b + u);
    forward_s.push_back(f);
    backward_s.push_back(b);
    optimizer_s.push_back(u);
  }
  r.step_ms = median(step_s) * 1e3;
  r.forward_ms = median(forward_s) * 1e3;
  r.backward_ms = median(backward_s) * 1e3;
  r.optimizer_ms = median(optimizer_s) * 1e3;
  r.tokens_per_s = static_cast<double>(o.batch * o.context) / median(step_s);
  const size_t peak = max_memory_allocated(kCPU);
  r.allocated_growth = static_cast<double>(peak - allocated_before);
  r.rss_growth = static_cast<double>(peak_rss() - std::min(peak_rss(), rss_before));
  // Allocated bytes count whole blocks, as PyTorch's do: a request served by a cached block too
  // little larger to split carries the rest. Requested bytes are what the tensors asked for, so
  // a change in the allocator's block choices shows in the first figure and not the second.
  const size_t peak_requested =
      static_cast<size_t>(memory_stats(kCPU).at("requested_bytes.all.peak"));
  std::printf(
      "headroom: peak allocated %zu B = %.1f MiB (%.1f MiB before the first step: "
      "parameters; +%.1f MiB gradients, optimizer state, activations); peak requested %zu B; "
      "peak reserved %.1f MiB; peak RSS growth %.1f MiB\n",
      peak, static_cast<double>(peak) / kMiB, static_cast<double>(allocated_before) / kMiB,
      r.allocated_growth / kMiB, peak_requested,
      static_cast<double>(max_memory_reserved(kCPU)) / kMiB, r.rss_growth / kMiB);
  return r;
}

// Runs the peer; returns false (saying why) when it cannot. It prints its own lines, and one
// "RESULT key=value ..." line that is parsed here.
bool run_peer(const Options& o, Result& peer, std::string& torch_version) {
  const auto result = bench::run_train_step_peer(
      {.layers = o.layers,
       .d_model = o.d_model,
       .heads = o.heads,
       .context = o.context,
       .batch = o.batch,
       .vocab = o.vocab,
       .steps = o.steps,
       .warmup = kWarmupSteps,
       .seed = kSeed,
       .lr = kLr,
       .weight_decay = kWeightDecay,
       .extra_args = "--precision " + precision_name(parse_precision(o.precision).precision)});
  if (!result) return false;
  std::map<std::string, std::string> fields = *result;
  auto number = [&](const char* key) {
    return fields.count(key) ? std::atof(fields[key].c_str()) : 0.0;
  };
  peer.tokens_per_s = number("tokens_per_s");
  peer.step_ms = number("step_ms");
  peer.forward_ms = number("forward_ms");
  peer.backward_ms = number("backward_ms");
  peer.optimizer_ms = number("optimizer_ms");
  peer.gflops = number("matmul_gflops");
  peer.first_loss = number("first_loss");
  peer.last_loss = number("last_loss");
  peer.rss_growth = number("peak_rss_growth_bytes");
  torch_version = fields.count("torch") ? fields["torch"] : "?";
  return true;
}

void print_row(const char* what, double ours, double theirs, const char* unit, int decimals) {
  std::printf("  %-26s %12.*f %12.*f %10.2f   %s\n", what, decimals, ours, decimals, theirs,
              theirs != 0 ? ours / theirs : 0.0, unit);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  if (o.threads > 0) omp_set_num_threads(static_cast<int>(o.threads));
  try {
    const Result ours = run_headroom(o);
    std::printf("headroom: %.0f tokens/s (median step %.1f ms over %lld steps)\n",
                ours.tokens_per_s, ours.step_ms, static_cast<long long>(o.steps));
    if (!o.peer) return 0;
    Result peer;
    std::string torch_version;
    if (!run_peer(o, peer, torch_version)) return 0;
    std::printf("\n%d threads; medians over %lld timed steps  %12s %12s %10s\n",
                omp_get_max_threads(), static_cast<long long>(o.steps), "headroom",
                ("torch " + torch_version).c_str(), "hr/torch");
    print_row("tokens/s", ours.tokens_per_s, peer.tokens_per_s, "", 0);
    print_row("step", ours.step_ms, peer.step_ms, "ms", 1);
    print_row("  forward (loss)", ours.forward_ms, peer.forward_ms, "ms", 1);
    print_row("  backward", ours.backward_ms, peer.backward_ms, "ms", 1);
    print_row("  optimizer + zero_grad", ours.optimizer_ms, peer.optimizer_ms, "ms", 1);
    // PyTorch's CPU allocator keeps no statistics: RSS is what both sides can be measured by.
    print_row("peak RSS growth", ours.rss_growth / kMiB, peer.rss_growth / kMiB, "MiB", 1);
    std::printf("  %-26s %12.1f %12s %10s   MiB\n", "peak allocated growth",
                ours.allocated_growth / kMiB, "-", "-");
    print_row("1024^3 matmul", ours.gflops, peer.gflops, "GFLOP/s", 1);
    print_row("loss, first step", ours.first_loss, peer.first_loss, "", 4);
    print_row("loss, last step", ours.last_loss, peer.last_loss, "", 4);
    std::printf(
        "  (headroom's forward includes most of the LM head's backward: linear_cross_entropy "
        "computes its gradients chunk by chunk in the forward pass)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}

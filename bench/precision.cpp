// Step time and peak allocated memory of one GPT-2-shaped model under each precision recipe
// (fp32, bf16 autocast, fp16 autocast + GradScaler, pure bf16 with stochastic rounding, and with
// Kahan summation), side by side with PyTorch on the same model and batches
// (bench/train_step_peer.py --precision: torch.autocast on the CPU, or model.to(bfloat16)).
//
// Run (Release build):
//   ninja -C build precision && build/bench/precision [--layers 4] [--d-model 256] [--heads 4]
//       [--context 256] [--batch 4] [--vocab 50304] [--steps 5] [--threads N] [--no-peer]
//       [--recipes fp32,bf16,fp16,pure_bf16,pure_bf16+kahan]
//   build/bench/precision --curves [--curve-steps 400] [--text FILE]
//   build/bench/precision --fp8 [--curve-steps 400] [--text FILE]
// --curves trains a small byte-level GPT-2 (vocab 256, 4 layers, d 128, context 64, batch 8)
// on a text (README.md by default) under every recipe and prints the loss curves side by side.
// A recipe "bf16+fp8:R" is bf16 autocast with the projections in FP8 under Transformer Engine's
// recipe R (delayed, current, mxfp8, block; HYBRID format, TE's defaults otherwise); --fp8 runs
// bf16 and the four FP8 recipes and says whether each ends within 3% of bf16's final loss
// (issue 23's bar).
// The first 2 steps of each recipe are warm-up. Peak allocated is headroom's allocator statistic
// (PyTorch's CPU allocator keeps none, so its column is the growth of the resident set).
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/precision.h"
#include "autograd/engine.h"
#include "bench_support.h"
#include "core/error.h"
#include "memory/device_memory.h"
#include "nn/causal_lm.h"
#include "nn/linear_fp8.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"

namespace {

using namespace headroom;
using Clock = std::chrono::steady_clock;

constexpr int kWarmupSteps = 2;
constexpr uint64_t kSeed = 1234;
constexpr double kLr = 1e-4;
constexpr double kWeightDecay = 0.1;
constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  int64_t layers = 4;
  int64_t d_model = 256;
  int64_t heads = 4;
  int64_t context = 256;
  int64_t batch = 4;
  int64_t vocab = 50304;
  int64_t steps = 5;
  int64_t threads = 0;
  bool peer = true;
  bool curves = false;
  bool fp8 = false;  // --fp8: the curves of bf16 and of each FP8 recipe
  int64_t curve_steps = 400;
  std::string text;
  std::vector<std::string> recipes = {"fp32", "bf16", "fp16", "pure_bf16", "pure_bf16+kahan"};
};

Options parse_options(int argc, char** argv) {
  Options o;
  bool no_peer = false;
  std::string recipes;
  bench::parse_command_line(
      "precision",
      "[--layers N] [--d-model N] [--heads N] [--context N] [--batch N] [--vocab N] [--steps N] "
      "[--threads N] [--no-peer] [--recipes a,b,...] | --curves [--curve-steps N] [--text FILE] "
      "[--recipes a,b,...] | --fp8 [--curve-steps N] [--text FILE]",
      argc, argv, {{"--no-peer", &no_peer}, {"--curves", &o.curves}, {"--fp8", &o.fp8}},
      {{"--recipes", &recipes}, {"--text", &o.text}},
      {{"--layers", &o.layers},
       {"--d-model", &o.d_model},
       {"--heads", &o.heads},
       {"--context", &o.context},
       {"--batch", &o.batch},
       {"--vocab", &o.vocab},
       {"--steps", &o.steps},
       {"--threads", &o.threads},
       {"--curve-steps", &o.curve_steps}});
  o.peer = !no_peer;
  if (o.fp8) {
    o.curves = true;
    o.recipes = {"bf16", "bf16+fp8:delayed", "bf16+fp8:current", "bf16+fp8:mxfp8",
                 "bf16+fp8:block"};
  }
  if (!recipes.empty()) {
    o.recipes.clear();
    std::stringstream list(recipes);
    for (std::string name; std::getline(list, name, ',');) o.recipes.push_back(name);
  }
  return o;
}

struct Result {
  double step_ms = 0;
  double tokens_per_s = 0;
  double peak_allocated = 0;  // bytes, parameters included
  double rss_growth = 0;      // bytes, over the RSS before the model was built
  double last_loss = 0;
  int skipped = 0;
  bool ran = false;
};

Result run_headroom(const Options& o, const PrecisionRecipe& recipe) {
  const GPT2Config config = bench::gpt2_config(o.layers, o.d_model, o.heads, o.context, o.vocab);

  Result r;
  empty_cache(kCPU);
  reset_peak_memory_stats(kCPU);
  const size_t allocated_before = memory_allocated(kCPU);
  std::unique_ptr<CausalLM> model = make_causal_lm(config, kCPU, kSeed);
  model->to(recipe.param_dtype);
  AdamW optimizer(weight_decay_param_groups(model->named_parameters(), kWeightDecay),
                  {.lr = kLr,
                   .weight_decay = kWeightDecay,
                   .state_dtype = recipe.optimizer_state_dtype,
                   .kahan_summation = recipe.kahan_summation,
                   .stochastic_rounding = recipe.stochastic_rounding});
  GradScaler scaler({.enabled = recipe.loss_scaling});
  std::vector<double> step_s;
  for (int64_t step = 0; step < kWarmupSteps + o.steps; ++step) {
    const Tensor tokens = Tensor::from_ints(
        bench::batch_tokens(kSeed, o.batch, o.context, o.vocab, step), {o.batch, o.context + 1});
    const Tensor input_ids = tokens.narrow(1, 0, o.context).contiguous();
    const Tensor targets = tokens.narrow(1, 1, o.context).contiguous();
    const auto t0 = Clock::now();
    Tensor loss;
    {
      std::optional<Autocast> region;
      if (recipe.autocast_dtype) region.emplace(DeviceType::cpu, recipe.autocast_dtype);
      loss = model->loss(input_ids, targets);
    }
    backward(scaler.scale(loss));
    if (!scaler.step(optimizer)) ++r.skipped;
    scaler.update();
    optimizer.zero_grad();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.last_loss = loss.item();
    if (step >= kWarmupSteps) step_s.push_back(seconds);
  }
  r.step_ms = bench::median(step_s) * 1e3;
  r.tokens_per_s = static_cast<double>(o.batch * o.context) / bench::median(step_s);
  r.peak_allocated = static_cast<double>(max_memory_allocated(kCPU) - allocated_before);
  r.ran = true;
  std::printf(
      "headroom %-16s %8.1f ms/step  %7.0f tokens/s  peak allocated %8.1f MiB  "
      "last loss %.4f  skipped %d\n",
      recipe.name().c_str(), r.step_ms, r.tokens_per_s, r.peak_allocated / kMiB, r.last_loss,
      r.skipped);
  return r;
}

Result run_peer(const Options& o, const std::string& precision) {
  Result r;
  const auto fields = bench::run_train_step_peer({.layers = o.layers,
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
                                                  .extra_args = "--precision " + precision});
  if (!fields || !fields->count("tokens_per_s")) return r;
  r.step_ms = std::atof(fields->at("step_ms").c_str());
  r.tokens_per_s = std::atof(fields->at("tokens_per_s").c_str());
  r.rss_growth = std::atof(fields->at("peak_rss_growth_bytes").c_str());
  r.last_loss = std::atof(fields->at("last_loss").c_str());
  r.ran = true;
  return r;
}

// A --recipes name: a precision recipe, optionally "+fp8:<TE recipe>".
struct CurveRecipe {
  PrecisionRecipe precision;
  std::optional<Fp8Recipe> fp8;
};

CurveRecipe parse_curve_recipe(const std::string& name) {
  const size_t plus = name.find("+fp8:");
  CurveRecipe r{parse_precision(name.substr(0, plus)), std::nullopt};
  if (plus != std::string::npos) {
    Fp8Recipe fp8;
    fp8.kind = parse_fp8_recipe_kind(name.substr(plus + 5));
    r.fp8 = fp8;
  }
  return r;
}

// Loss per step of the byte-level GPT-2 on `text` under `curve` (linear decay, warmup 5%,
// max_grad_norm 1, as a Trainer run would have them; FP8 scales updated where the Trainer does).
std::vector<double> loss_curve(const Options& o, const CurveRecipe& curve,
                               const std::string& text) {
  const PrecisionRecipe& recipe = curve.precision;
  const int64_t batch = 8, context = 64;
  const GPT2Config config = bench::gpt2_config(4, 128, 4, context, 256);
  auto model = make_causal_lm(config, kCPU, kSeed);
  model->to(recipe.param_dtype);
  std::optional<Fp8Training> fp8;
  if (curve.fp8) {
    fp8.emplace(*curve.fp8);
    enable_fp8_linears(*model, *fp8);
  }
  AdamW optimizer(model->named_parameters(), {.lr = 2e-3,
                                              .weight_decay = 0.0,
                                              .state_dtype = recipe.optimizer_state_dtype,
                                              .kahan_summation = recipe.kahan_summation,
                                              .stochastic_rounding = recipe.stochastic_rounding});
  GradScaler scaler({.enabled = recipe.loss_scaling});
  LRScheduler scheduler(
      optimizer,
      {.type = SchedulerType::linear, .num_training_steps = o.curve_steps, .warmup_ratio = 0.05});
  std::vector<double> losses;
  const size_t span = text.size() - static_cast<size_t>(context) - 1;
  for (int64_t step = 0; step < o.curve_steps; ++step) {
    std::vector<int64_t> ids, targets;
    const std::vector<int64_t> starts =
        bench::batch_tokens(kSeed, batch, 0, static_cast<int64_t>(span), step);
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t t = 0; t < context; ++t) {
        ids.push_back(static_cast<unsigned char>(text[static_cast<size_t>(starts[b]) + t]));
        targets.push_back(static_cast<unsigned char>(text[static_cast<size_t>(starts[b]) + t + 1]));
      }
    }
    Tensor loss;
    {
      std::optional<Autocast> region;
      if (recipe.autocast_dtype) region.emplace(DeviceType::cpu, recipe.autocast_dtype);
      loss = model->loss(Tensor::from_ints(ids, {batch, context}),
                         Tensor::from_ints(targets, {batch, context}));
    }
    if (fp8) fp8->end_forward();
    backward(scaler.scale(loss));
    if (fp8) fp8->end_backward();
    scaler.unscale_(optimizer);
    clip_grad_norm_(optimizer, 1.0);
    scaler.step(optimizer);
    scaler.update();
    scheduler.step();
    optimizer.zero_grad();
    if (fp8) fp8->next_step();
    losses.push_back(loss.item());
  }
  return losses;
}

int print_curves(const Options& o) {
  const std::filesystem::path path = o.text.empty()
                                         ? std::filesystem::path(HEADROOM_SOURCE_DIR) / "README.md"
                                         : std::filesystem::path(o.text);
  std::ifstream file(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (text.size() < 1000) {
    std::fprintf(stderr, "precision: %s: %zu bytes of text; need at least 1000\n", path.c_str(),
                 text.size());
    return 2;
  }
  std::printf(
      "loss curves: byte-level GPT-2 (4 layers, d 128) on %s (%zu bytes), %lld steps, "
      "batch 8 x 64 tokens, AdamW lr 2e-3 linear decay, max_grad_norm 1\n",
      path.c_str(), text.size(), static_cast<long long>(o.curve_steps));
  std::vector<std::vector<double>> curves;
  for (const std::string& name : o.recipes) {
    curves.push_back(loss_curve(o, parse_curve_recipe(name), text));
  }
  std::printf("%6s", "step");
  for (const std::string& name : o.recipes) std::printf(" %16s", name.c_str());
  std::printf("\n");
  auto mean = [](const std::vector<double>& v, size_t from, size_t to) {
    double total = 0.0;
    for (size_t i = from; i < to; ++i) total += v[i];
    return total / static_cast<double>(to - from);
  };
  const size_t n = static_cast<size_t>(o.curve_steps);
  const size_t every = std::max<size_t>(1, n / 20);
  for (size_t s = 0; s < n; s += every) {
    std::printf("%6zu", s);
    // Means over the window, so that one batch's difficulty does not hide the trend.
    for (const auto& curve : curves) std::printf(" %16.4f", mean(curve, s, std::min(n, s + every)));
    std::printf("\n");
  }
  const size_t tail = std::max<size_t>(1, n / 20);
  std::printf("%6s", "last");
  for (const auto& curve : curves) std::printf(" %16.4f", mean(curve, n - tail, n));
  std::printf("   (mean of the last %zu steps)\n%6s", tail, "vs 1st");
  const double reference = mean(curves.front(), n - tail, n);
  for (const auto& curve : curves) {
    std::printf(" %+15.2f%%", 100.0 * (mean(curve, n - tail, n) / reference - 1.0));
  }
  std::printf("\n");
  if (o.fp8) {
    std::printf("%6s", "<= 3%");
    for (const auto& curve : curves) {
      const double off = std::abs(mean(curve, n - tail, n) / reference - 1.0);
      std::printf(" %16s", off <= 0.03 ? "yes" : "NO");
    }
    std::printf("   (issue 23: each FP8 recipe within 3%% of bf16's final loss)\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  if (o.threads > 0) omp_set_num_threads(static_cast<int>(o.threads));
  try {
    if (o.curves) return print_curves(o);
    std::printf(
        "GPT-2 %lld layers, d_model %lld, %lld heads, context %lld, batch %lld, vocab "
        "%lld; AdamW lr %g; %d threads; medians over %lld steps after %d warm-up\n",
        static_cast<long long>(o.layers), static_cast<long long>(o.d_model),
        static_cast<long long>(o.heads), static_cast<long long>(o.context),
        static_cast<long long>(o.batch), static_cast<long long>(o.vocab), kLr,
        omp_get_max_threads(), static_cast<long long>(o.steps), kWarmupSteps);
    std::vector<std::pair<std::string, std::pair<Result, Result>>> rows;
    for (const std::string& name : o.recipes) {
      const PrecisionRecipe recipe = parse_precision(name);
      const Result ours = run_headroom(o, recipe);
      Result peer;
      // torch has no Kahan variant: its pure bf16 row is plain bf16 AdamW (round to nearest).
      if (o.peer && !recipe.kahan_summation) peer = run_peer(o, precision_name(recipe.precision));
      rows.emplace_back(recipe.name(), std::pair{ours, peer});
    }
    std::printf("\n%-16s %12s %12s %9s %14s %14s %10s %10s\n", "recipe", "hr ms/step",
                "torch ms/step", "speedup", "hr peak alloc", "torch RSS grow", "hr loss",
                "torch loss");
    for (const auto& [name, pair] : rows) {
      const auto& [ours, peer] = pair;
      if (peer.ran) {
        std::printf("%-16s %12.1f %12.1f %8.2fx %10.1f MiB %10.1f MiB %10.4f %10.4f\n",
                    name.c_str(), ours.step_ms, peer.step_ms, peer.step_ms / ours.step_ms,
                    ours.peak_allocated / kMiB, peer.rss_growth / kMiB, ours.last_loss,
                    peer.last_loss);
      } else {
        std::printf("%-16s %12.1f %12s %9s %10.1f MiB %14s %10.4f %10s\n", name.c_str(),
                    ours.step_ms, "-", "-", ours.peak_allocated / kMiB, "-", ours.last_loss, "-");
      }
    }
    std::printf("(torch 1.13 has no fp16 autocast on the CPU and no Kahan-summed AdamW: '-')\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "precision: %s\n", e.what());
    return 1;
  }
  return 0;
}

// The memory trade-off table: one GPT-2-shaped model trained for a few steps on real text under
// each memory saver alone and in the usual combinations, with peak allocated / reserved memory,
// step time, tokens/s and final loss per row; written as a table, as CSV and as a PNG plot of
// peak memory against step time. The fp32, bf16 and checkpointing (full, every_2) rows also run
// in PyTorch (bench/train_step_peer.py on the same batches) and print its step time and memory
// beside ours.
//
// Run (Release build):
//   ninja -C build memory_tradeoff && build/bench/memory_tradeoff [--layers 6] [--d-model 256]
//       [--heads 4] [--context 256] [--batch 8] [--vocab 50304] [--steps 8] [--text FILE]
//       [--rows name,name,...] [--out DIR] [--no-peer]
//   build/bench/memory_tradeoff --replot DIR/memory_tradeoff.csv    # the PNG again from a table
// The text defaults to Debian's fortunes (/usr/share/games/fortunes/fortunes), read byte by byte
// (ids 0..255 of a vocabulary padded to GPT-2's 50304, as GPT-2 pads 50257). The first 2 steps of
// each row are warm-up; step time and tokens/s are medians over the rest; peak memory covers the
// whole row, parameters included, read from the CPU CachingAllocator's statistics exactly as
// torch.cuda.max_memory_allocated() reads a GPU's. PyTorch's CPU allocator keeps no statistics,
// so its column is the growth of its resident set.
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/precision.h"
#include "autograd/engine.h"
#include "bench_support.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "integrations/line_plot.h"
#include "memory/device_memory.h"
#include "memsave/checkpoint_policy.h"
#include "nn/causal_lm.h"
#include "ops/elementwise.h"
#include "optim/clip_grad.h"
#include "optim/optimizer_factory.h"

namespace {

using namespace headroom;
using Clock = std::chrono::steady_clock;

constexpr int kWarmupSteps = 2;
constexpr uint64_t kSeed = 1234;
constexpr double kLr = 1e-3;
constexpr double kWeightDecay = 0.1;
constexpr double kMiB = 1024.0 * 1024.0;

// One row: a precision recipe, an optimizer, a checkpointing policy and an accumulation count.
struct Row {
  std::string name;
  std::string precision = "fp32";
  std::string optim = "adamw_torch";
  std::string checkpointing = "none";
  int64_t accumulation = 1;
  // The peer's --precision, or empty when PyTorch does not run this row (its --checkpointing is
  // the row's: none, full or every_N).
  std::string peer = "";
};

std::vector<Row> all_rows() {
  return {
      {.name = "fp32+adamw", .peer = "fp32"},
      {.name = "bf16", .precision = "bf16", .peer = "bf16"},
      {.name = "bf16+full+adamw_8bit",
       .precision = "bf16",
       .optim = "adamw_8bit",
       .checkpointing = "full"},
      {.name = "ckpt full", .checkpointing = "full", .peer = "fp32"},
      {.name = "ckpt every_2", .checkpointing = "every_2", .peer = "fp32"},
      {.name = "ckpt selective", .checkpointing = "selective"},
      {.name = "fp16+scaler", .precision = "fp16"},
      {.name = "pure_bf16", .precision = "pure_bf16"},
      {.name = "pure_bf16+adamw_8bit", .precision = "pure_bf16", .optim = "adamw_8bit"},
      {.name = "adamw_bf16", .optim = "adamw_bf16"},
      {.name = "adamw_8bit", .optim = "adamw_8bit"},
      {.name = "lion", .optim = "lion"},
      {.name = "lion_8bit", .optim = "lion_8bit"},
      {.name = "adafactor", .optim = "adafactor"},
      {.name = "sgd", .optim = "sgd"},
      {.name = "lomo", .optim = "lomo"},
      {.name = "accum 4", .accumulation = 4},
  };
}

struct Options {
  int64_t layers = 6;
  int64_t d_model = 256;
  int64_t heads = 4;
  int64_t context = 256;
  int64_t batch = 8;
  int64_t vocab = 50304;
  int64_t steps = 8;
  bool peer = true;
  std::string text;
  std::string out = "bench/results";
  std::string replot;
  std::vector<std::string> rows;
};

Options parse_options(int argc, char** argv) {
  Options o;
  bool no_peer = false;
  std::string rows;
  bench::parse_command_line(
      "memory_tradeoff",
      "[--layers N] [--d-model N] [--heads N] [--context N] [--batch N] [--vocab N] [--steps N] "
      "[--text FILE] [--rows a,b,...] [--out DIR] [--no-peer] | --replot CSV",
      argc, argv, {{"--no-peer", &no_peer}},
      {{"--rows", &rows}, {"--text", &o.text}, {"--out", &o.out}, {"--replot", &o.replot}},
      {{"--layers", &o.layers},
       {"--d-model", &o.d_model},
       {"--heads", &o.heads},
       {"--context", &o.context},
       {"--batch", &o.batch},
       {"--vocab", &o.vocab},
       {"--steps", &o.steps}});
  o.peer = !no_peer;
  std::stringstream list(rows);
  for (std::string name; std::getline(list, name, ',');) o.rows.push_back(name);
  return o;
}

std::string read_text(const Options& o) {
  std::string path = o.text;
  if (path.empty()) {
    path = "/usr/share/games/fortunes/fortunes";
    if (!std::filesystem::exists(path)) {
      path = (std::filesystem::path(HEADROOM_SOURCE_DIR) / "README.md").string();
    }
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw ValueError(str_cat("memory_tradeoff: cannot read --text ", path));
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

// Every step's batch, [batch, context + 1] byte ids from windows of the text at positions drawn
// from the step's splitmix64 stream; the same for every row and for the peer.
std::vector<std::vector<int64_t>> make_batches(const Options& o, const std::string& text) {
  const int64_t span = static_cast<int64_t>(text.size()) - o.context - 1;
  if (span < 1) {
    throw ValueError(str_cat("memory_tradeoff: the text has ", text.size(), " bytes; --context ",
                             o.context, " needs at least ", o.context + 2));
  }
  std::vector<std::vector<int64_t>> batches;
  for (int64_t step = 0; step < kWarmupSteps + o.steps; ++step) {
    const std::vector<int64_t> starts = bench::batch_tokens(kSeed, o.batch, 0, span, step);
    std::vector<int64_t> ids;
    for (int64_t b = 0; b < o.batch; ++b) {
      for (int64_t t = 0; t <= o.context; ++t) {
        ids.push_back(static_cast<unsigned char>(text[static_cast<size_t>(starts[b] + t)]));
      }
    }
    batches.push_back(std::move(ids));
  }
  return batches;
}

struct Result {
  bool ran = false;
  std::string error;
  double step_ms = 0;
  double tokens_per_s = 0;
  double peak_allocated = 0;
  double peak_reserved = 0;
  double final_loss = 0;
  double peer_step_ms = 0;
  double peer_rss_growth = 0;
  bool peer_ran = false;
};

Result run_row(const Options& o, const Row& row, const std::vector<std::vector<int64_t>>& batches) {
  Result r;
  if (o.batch % row.accumulation != 0) {
    r.error = str_cat("--batch ", o.batch, " is not a multiple of ", row.accumulation);
    return r;
  }
  const PrecisionRecipe recipe = parse_precision(row.precision);
  empty_cache(kCPU);
  reset_peak_memory_stats(kCPU);
  std::unique_ptr<CausalLM> model = make_causal_lm(
      bench::gpt2_config(o.layers, o.d_model, o.heads, o.context, o.vocab), kCPU, kSeed);
  model->to(recipe.param_dtype);
  enable_gradient_checkpointing(*model, parse_checkpoint_policy(row.checkpointing));
  std::unique_ptr<Optimizer> optimizer =
      make_optimizer({.optim = row.optim,
                      .learning_rate = row.optim == "lion" ? kLr / 4 : kLr,
                      .weight_decay = kWeightDecay,
                      .seed = kSeed},
                     model->named_parameters());
  GradScaler scaler({.enabled = recipe.loss_scaling});
  const int64_t micro = o.batch / row.accumulation;
  std::vector<double> step_s;
  for (size_t step = 0; step < batches.size(); ++step) {
    const Tensor tokens = Tensor::from_ints(batches[step], {o.batch, o.context + 1});
    const auto t0 = Clock::now();
    double loss_sum = 0.0;
    auto micro_loss = [&](int64_t m) {
      const Tensor rows = tokens.narrow(0, m * micro, micro);
      std::optional<Autocast> region;
      if (recipe.autocast_dtype) region.emplace(DeviceType::cpu, recipe.autocast_dtype);
      Tensor loss = model->loss(rows.narrow(1, 0, o.context).contiguous(),
                                rows.narrow(1, 1, o.context).contiguous());
      return row.accumulation > 1 ? scale(loss, 1.0 / static_cast<double>(row.accumulation)) : loss;
    };
    if (optimizer->updates_in_backward()) {
      for (int pass = 0; pass < optimizer->backward_passes(); ++pass) {
        optimizer->begin_backward_pass(pass);
        Tensor loss = micro_loss(0);
        backward(loss);
        loss_sum = loss.item();
      }
      optimizer->step();
    } else {
      for (int64_t m = 0; m < row.accumulation; ++m) {
        Tensor loss = micro_loss(m);
        backward(scaler.scale(loss));
        loss_sum += loss.item();
      }
      scaler.unscale_(*optimizer);
      clip_grad_norm_(*optimizer, 1.0);
      scaler.step(*optimizer);
      scaler.update();
      optimizer->zero_grad();
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    r.final_loss = loss_sum;
    if (step >= static_cast<size_t>(kWarmupSteps)) step_s.push_back(seconds);
  }
  r.step_ms = bench::median(step_s) * 1e3;
  r.tokens_per_s = static_cast<double>(o.batch * o.context) / bench::median(step_s);
  r.peak_allocated = static_cast<double>(max_memory_allocated(kCPU));
  r.peak_reserved = static_cast<double>(max_memory_reserved(kCPU));
  r.ran = true;
  return r;
}

// The PyTorch peer on the same batches (written to a file it reads).
void run_peer(const Options& o, const Row& row, const std::string& batches_file, Result& r) {
  if (row.peer.empty()) return;
  const auto fields = bench::run_train_step_peer(
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
       .extra_args = str_cat("--precision ", row.peer, " --checkpointing ", row.checkpointing,
                             " --max-grad-norm 1 --batches ", batches_file)});
  if (!fields) return;
  r.peer_step_ms = std::atof(fields->at("step_ms").c_str());
  r.peer_rss_growth = std::atof(fields->at("peak_rss_growth_bytes").c_str());
  r.peer_ran = true;
}

// The trade-off curve: our rows only, as PyTorch's figures are resident-set growth, not
// allocator peaks (and its bf16 rows on CPUs without bf16 instructions are off the scale).
PlotSeries tradeoff_series() {
  return {
      .label = "headroom (peak allocated)", .lines = false, .markers = true, .point_labels = true};
}

void write_tradeoff_plot(const std::string& path, const PlotSeries& ours) {
  write_plot_png(path, {ours},
                 {.title = "GPT-2 training step: peak memory against step time",
                  .x_label = "step time (ms)",
                  .y_label = "peak allocated (MiB)"});
}

// --replot CSV: the plot again from a table this program wrote, without training.
int replot(const std::string& csv_path) {
  std::ifstream file(csv_path);
  if (!file) throw ValueError(str_cat("memory_tradeoff: cannot read --replot ", csv_path));
  PlotSeries ours = tradeoff_series();
  std::string line;
  std::getline(file, line);  // the header
  for (int line_number = 2; std::getline(file, line); ++line_number) {
    std::vector<std::string> fields;
    std::stringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) fields.push_back(cell);
    if (fields.size() < 8) {
      throw ValueError(
          str_cat(csv_path, ":", line_number, ": ", fields.size(), " fields, expected at least 8"));
    }
    ours.labels.push_back(fields[0]);
    ours.y.push_back(std::atof(fields[5].c_str()) / kMiB);
    ours.x.push_back(std::atof(fields[7].c_str()));
  }
  const std::string png_path =
      (std::filesystem::path(csv_path).parent_path() / "memory_tradeoff.png").string();
  write_tradeoff_plot(png_path, ours);
  std::printf("wrote %s\n", png_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  if (!o.replot.empty()) return replot(o.replot);
  std::vector<Row> rows;
  for (const Row& row : all_rows()) {
    if (o.rows.empty() || std::find(o.rows.begin(), o.rows.end(), row.name) != o.rows.end()) {
      rows.push_back(row);
    }
  }
  const std::string text = read_text(o);
  const std::vector<std::vector<int64_t>> batches = make_batches(o, text);
  std::filesystem::create_directories(o.out);
  const std::string batches_file =
      (std::filesystem::path(o.out) / "memory_tradeoff_batches.bin").string();
  {
    std::string bytes;
    for (const auto& batch : batches) {
      bytes.append(reinterpret_cast<const char*>(batch.data()), batch.size() * sizeof(int64_t));
    }
    write_file_atomically(batches_file, bytes);
  }
  std::printf(
      "memory_tradeoff: GPT-2 %lld layers, d %lld, %lld heads, vocab %lld; batch %lld x "
      "%lld tokens; %lld timed steps (+%d warm-up); %d threads; lr %g, wd %g, "
      "max_grad_norm 1\n",
      static_cast<long long>(o.layers), static_cast<long long>(o.d_model),
      static_cast<long long>(o.heads), static_cast<long long>(o.vocab),
      static_cast<long long>(o.batch), static_cast<long long>(o.context),
      static_cast<long long>(o.steps), kWarmupSteps, omp_get_max_threads(), kLr, kWeightDecay);
  std::vector<Result> results;
  for (const Row& row : rows) {
    Result r;
    try {
      r = run_row(o, row, batches);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    if (o.peer) run_peer(o, row, batches_file, r);
    if (r.ran) {
      std::printf(
          "  %-22s peak allocated %8.1f MiB  reserved %8.1f MiB  %8.1f ms/step  "
          "%7.0f tokens/s  final loss %.4f\n",
          row.name.c_str(), r.peak_allocated / kMiB, r.peak_reserved / kMiB, r.step_ms,
          r.tokens_per_s, r.final_loss);
    } else {
      std::printf("  %-22s not run: %s\n", row.name.c_str(), r.error.c_str());
    }
    std::fflush(stdout);
    results.push_back(r);
  }
  std::filesystem::remove(batches_file);

  std::printf(
      "\n| configuration | peak allocated MiB | peak reserved MiB | step ms | tokens/s | "
      "final loss | torch step ms | torch RSS growth MiB |\n|---|---:|---:|---:|---:|---:|"
      "---:|---:|\n");
  std::string csv =
      "configuration,precision,optim,checkpointing,accumulation,peak_allocated_bytes,"
      "peak_reserved_bytes,step_ms,tokens_per_s,final_loss,torch_step_ms,"
      "torch_peak_rss_growth_bytes\n";
  PlotSeries ours = tradeoff_series();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const Result& r = results[i];
    if (!r.ran) continue;
    const std::string torch_ms = r.peer_ran ? str_cat(std::lround(r.peer_step_ms)) : "";
    const std::string torch_mib = r.peer_ran ? str_cat(std::lround(r.peer_rss_growth / kMiB)) : "";
    std::printf("| %s | %.1f | %.1f | %.0f | %.0f | %.3f | %s | %s |\n", row.name.c_str(),
                r.peak_allocated / kMiB, r.peak_reserved / kMiB, r.step_ms, r.tokens_per_s,
                r.final_loss, torch_ms.c_str(), torch_mib.c_str());
    csv += str_cat(row.name, ",", row.precision, ",", row.optim, ",", row.checkpointing, ",",
                   row.accumulation, ",", static_cast<int64_t>(r.peak_allocated), ",",
                   static_cast<int64_t>(r.peak_reserved), ",", r.step_ms, ",", r.tokens_per_s, ",",
                   r.final_loss, ",", r.peer_ran ? str_cat(r.peer_step_ms) : "", ",",
                   r.peer_ran ? str_cat(static_cast<int64_t>(r.peer_rss_growth)) : "", "\n");
    ours.x.push_back(r.step_ms);
    ours.y.push_back(r.peak_allocated / kMiB);
    ours.labels.push_back(row.name);
  }
  const std::filesystem::path csv_path = std::filesystem::path(o.out) / "memory_tradeoff.csv";
  const std::filesystem::path png_path = std::filesystem::path(o.out) / "memory_tradeoff.png";
  write_file_atomically(csv_path.string(), csv);
  write_tradeoff_plot(png_path.string(), ours);
  std::printf("\nwrote %s and %s\n", csv_path.c_str(), png_path.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "memory_tradeoff: error: %s\n", e.what());
  return 1;
}

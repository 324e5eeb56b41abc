// GPT-2 124M training throughput and peak memory on cuda:0 (bf16 autocast, fp32 master weights,
// AdamW), side by side with the same model in plain PyTorch on the same GPU, eager and
// torch.compile (tools/peer_gpt2_cuda.py), and with the planner's dry-run prediction of our peak.
// --model PRESET trains a preset of the Llama family instead (llama-3.2-1b: 16 layers, d 2048,
// GQA 32 / 8, ff 8192, V 128256), in full or with --lora R (LoRA r R, alpha R, on every linear
// layer: a frozen base in bf16, fp32 adapters, as PEFT under autocast), beside the same model in
// PyTorch (tools/peer_llama_cuda.py: transformers' LlamaForCausalLM and PEFT where the image has
// them, else the same computation in plain PyTorch).
//
// Run (Release build, on a GPU machine):
//   ninja -C build gpu_train_step && build/bench/gpu_train_step [--layers 12] [--d-model 768]
//       [--heads 12] [--context 1024] [--batch 16] [--vocab 50304] [--warmup 10] [--steps 20]
//       [--model PRESET [--lora R]] [--python python3] [--no-peer] [--no-compile] [--profile]
// Both sides run headroom's Trainer step / a plain PyTorch loop on the same splitmix64 token
// batches (bench/bench_support.h), read the loss each step (one host sync, as a logging loop
// does), and are timed over the --steps steps after --warmup, between two device
// synchronisations. MFU = tokens/s x (6N + 12 L d T) / 989e12 (H100 SXM bf16 dense, PaLM's
// FLOPs per token; 4N with LoRA, whose frozen weights take no weight gradient). Peaks are allocated
// bytes from the devices' caching allocators. The table is markdown, so scripts/gpu_check files it
// as printed.
// --profile instead runs the --warmup + --steps steps under `headroom train --profile`'s
// ProfilerCallback (the --steps recorded, with CUDA time: Note [CUDA time in the profiler]) and
// prints its key_averages table sorted by self CUDA time, then the CUDA time a step, the timed
// calls and streams, and the ten kernel-table calls of most CUDA time as a markdown table
// (scripts/gpu_check files it); no peer, no plan.
// Without a GPU it says so and exits 0: there is nothing to measure, and CI builds it anyway.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_support.h"
#include "core/device_kernels.h"
#include "io/hf_config.h"
#include "memory/device_memory.h"
#include "nn/model_presets.h"
#include "plan/dry_run.h"
#include "profile/key_averages.h"
#include "profile/profiler_callback.h"
#include "train/trainer.h"

namespace {

using namespace headroom;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSeed = 1234;
constexpr double kLr = 6e-4;
constexpr double kWeightDecay = 0.1;
constexpr double kPeakFlops = 989e12;  // H100 SXM, bf16 dense
constexpr double kMiB = 1024.0 * 1024.0;
// cuda:0; `--device cpu` runs the same program on the CPU, a smoke test of the bench itself.
Device g_device{DeviceType::cuda, 0};

struct Options {
  int64_t layers = 12, d_model = 768, heads = 12, context = 1024, batch = 16, vocab = 50304;
  int64_t warmup = 10, steps = 20;
  std::string model;  // a preset name; empty: GPT-2 of the sizes above
  int64_t lora = 0;   // LoRA rank on every linear layer; 0: full training
  std::string python = "python3";
  std::string device = "cuda:0";
  bool peer = true;
  bool compile = true;
  bool profile = false;
};

Options parse_options(int argc, char** argv) {
  Options o;
  bool no_peer = false, no_compile = false;
  bench::parse_command_line(
      "gpu_train_step",
      "[--layers N] [--d-model N] [--heads N] [--context N] [--batch N] [--vocab N] "
      "[--warmup N] [--steps N] [--model PRESET [--lora R]] [--python PATH] [--no-peer] "
      "[--no-compile] [--profile] [--device cpu]",
      argc, argv,
      {{"--no-peer", &no_peer}, {"--no-compile", &no_compile}, {"--profile", &o.profile}},
      {{"--python", &o.python}, {"--model", &o.model}, {"--device", &o.device}},
      {{"--layers", &o.layers},
       {"--d-model", &o.d_model},
       {"--heads", &o.heads},
       {"--context", &o.context},
       {"--batch", &o.batch},
       {"--vocab", &o.vocab},
       {"--warmup", &o.warmup},
       {"--steps", &o.steps},
       {"--lora", &o.lora}});
  o.peer = !no_peer;
  o.compile = !no_compile;
  if (o.lora < 0 || (o.lora > 0 && o.model.empty())) {
    std::fprintf(stderr, "gpu_train_step: --lora takes a positive rank, with --model\n");
    std::exit(2);
  }
  if (!o.model.empty()) {
    // The preset's sizes stand in for --layers, --d-model, --heads and --vocab.
    const ModelDims dims = model_dims(model_preset(o.model));
    o.layers = dims.layers, o.d_model = dims.hidden, o.heads = dims.heads, o.vocab = dims.vocab;
  }
  return o;
}

// What the tables call the run: "GPT-2", or the preset and how it trains.
std::string model_name(const Options& o) {
  if (o.model.empty()) return "GPT-2";
  return o.lora > 0 ? str_cat(o.model, " LoRA r ", o.lora, " all-linear") : o.model + " full";
}

void synchronize_gpu() {
  if (g_device.is_cuda()) find_device_kernels(DeviceType::cuda)->synchronize(g_device.index);
}

// The benchmark's batches on the GPU: the splitmix64 tokens of each step, copied to the device
// as DataLoaderBatchSource copies its batches (two [B, T] i64 tensors).
class TokenBatches final : public BatchSource {
 public:
  explicit TokenBatches(const Options& o) : o_(o) {}
  TokenBatch next_batch() override {
    const Tensor tokens =
        Tensor::from_ints(bench::batch_tokens(kSeed, o_.batch, o_.context, o_.vocab, consumed_++),
                          {o_.batch, o_.context + 1});
    return {tokens.narrow(1, 0, o_.context).contiguous().to(g_device),
            tokens.narrow(1, 1, o_.context).contiguous().to(g_device)};
  }
  int64_t batches_per_epoch() const override { return int64_t{1} << 40; }
  int64_t batches_consumed() const override { return consumed_; }
  int64_t eval_batch_count(int64_t) const override { return 0; }
  TokenBatch eval_batch(int64_t, int64_t) const override {
    throw ValueError("gpu_train_step: no eval split");
  }
  nlohmann::json state_dict() const override { return {{"consumed", consumed_}}; }
  void load_state_dict(const nlohmann::json& state) override {
    consumed_ = state.at("consumed").get<int64_t>();
  }

 private:
  Options o_;
  int64_t consumed_ = 0;
};

// The Trainer's arguments: a model directory (config.json only: HF's initialisation from the
// seed, dropout off as in the peer), bf16 autocast over fp32 weights, AdamW at a constant rate,
// no clipping (the peer does none).
TrainingArguments trainer_arguments(const Options& o, const std::filesystem::path& dir) {
  HfConfig config =
      o.model.empty()
          ? HfConfig(bench::gpt2_config(o.layers, o.d_model, o.heads, o.context, o.vocab))
          : model_preset(o.model);
  std::visit(
      [](auto& c) {
        c.bos_token_id = std::nullopt;
        c.eos_token_id = {};
      },
      config);
  std::filesystem::create_directories(dir / "model");
  write_hf_config((dir / "model").string(), config);
  TrainingArguments args;
  args.model = (dir / "model").string();
  args.data = "(synthetic)";
  args.output_dir = (dir / "out").string();
  args.device = g_device.str();
  args.seed = static_cast<int64_t>(kSeed);
  args.max_seq_length = o.context;
  args.per_device_train_batch_size = o.batch;
  args.max_steps = o.warmup + o.steps;
  args.precision = "bf16";
  args.optim = "adamw_torch";
  args.learning_rate = kLr;
  args.weight_decay = kWeightDecay;
  args.lr_scheduler_type = "constant";
  args.max_grad_norm = 0.0;
  args.save_strategy = "no";
  args.eval_strategy = "no";
  args.disable_tqdm = true;
  args.sample_max_new_tokens = 0;
  if (o.lora > 0) {
    args.use_peft = true;
    args.lora_r = o.lora;
    args.lora_alpha = static_cast<double>(o.lora);
    args.lora_dropout = 0.0;
    args.lora_target_modules = "all-linear";
  }
  return args;
}

struct Result {
  std::string name;
  double tokens_per_s = 0, step_ms = 0;
  double peak_allocated = 0;  // bytes
  double first_loss = 0, last_loss = 0;
  int64_t parameters = 0;
};

double flops_per_token(const Options& o, int64_t parameters) {
  return (o.lora > 0 ? 4.0 : 6.0) * static_cast<double>(parameters) +
         12.0 * static_cast<double>(o.layers * o.d_model * o.context);
}

Result run_headroom(const Options& o, const TrainingArguments& args) {
  Result r{.name = "headroom"};
  Trainer trainer(args, [&](const TrainingArguments&, const Tokenizer&, int64_t, Device) {
    return std::make_unique<TokenBatches>(o);
  });
  r.parameters = trainer.model().num_parameters();
  // As the dry run counts (and Trainer::train's metrics): from after the model is built.
  reset_peak_memory_stats(g_device);
  std::vector<double> timed_ms;
  Clock::time_point start;
  for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
    if (step == o.warmup) {
      synchronize_gpu();
      start = Clock::now();
    }
    const auto t0 = Clock::now();
    const double loss = trainer.step().loss;  // reads the loss back: a sync per step
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (step == 0) r.first_loss = loss;
    r.last_loss = loss;
    const bool timed = step >= o.warmup;
    if (timed) timed_ms.push_back(ms);
    std::printf("headroom: step %3lld%s loss %.4f  %8.1f ms\n", static_cast<long long>(step),
                timed ? "        " : " warm-up", loss, ms);
  }
  synchronize_gpu();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.tokens_per_s = static_cast<double>(o.steps * o.batch * o.context) / seconds;
  r.step_ms = bench::median(timed_ms);
  r.peak_allocated = static_cast<double>(max_memory_allocated(g_device));
  return r;
}

// --profile: the steps under ProfilerCallback, as `headroom train --profile` runs them, with a
// schedule that records the --steps after the --warmup.
void run_profile(const Options& o, TrainingArguments args) {
  args.profile = true;
  args.profile_skip_first = 0;
  args.profile_wait = 0;
  args.profile_warmup = o.warmup;
  args.profile_active = o.steps;
  args.profile_repeat = 1;
  Trainer trainer(args, [&](const TrainingArguments&, const Tokenizer&, int64_t, Device) {
    return std::make_unique<TokenBatches>(o);
  });
  ProfilerCallback callback(args);
  callback.on_train_begin(trainer);
  for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
    const auto t0 = Clock::now();
    const double loss = trainer.step().loss;
    std::printf("headroom: step %3lld%s loss %.4f  %8.1f ms\n", static_cast<long long>(step),
                step >= o.warmup ? " profiled" : " warm-up ", loss,
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    callback.on_step_end(trainer);
  }
  std::filesystem::create_directories(args.output_dir);
  callback.on_train_end(trainer);  // the table sorted by self CUDA time, output_dir/trace.json

  const ProfilerEvents events = callback.profiler()->events();
  std::vector<KeyAverage> kernels;
  double cuda_us = 0.0;
  for (const KeyAverage& a : key_averages(events)) {
    if (a.device_type != DeviceType::cuda) continue;
    cuda_us += a.cuda_time_total_us;
    kernels.push_back(a);
  }
  std::stable_sort(kernels.begin(), kernels.end(), [](const KeyAverage& a, const KeyAverage& b) {
    return a.cuda_time_total_us > b.cuda_time_total_us;
  });
  std::map<uint64_t, int64_t> spans_of_stream;
  for (const DeviceActivity& d : events.device) ++spans_of_stream[d.stream];
  std::printf(
      "\nTop ten kernels by CUDA time: %s %lld layers, d_model %lld, context %lld, "
      "micro-batch %lld, %lld profiled steps; %.1f ms of CUDA time a step in %zu timed calls "
      "a step on %zu stream(s)\n\n",
      model_name(o).c_str(), static_cast<long long>(o.layers), static_cast<long long>(o.d_model),
      static_cast<long long>(o.context), static_cast<long long>(o.batch),
      static_cast<long long>(o.steps), cuda_us / 1e3 / static_cast<double>(o.steps),
      events.device.size() / static_cast<size_t>(o.steps), spans_of_stream.size());
  std::printf("| kernel | calls a step | CUDA ms a step | avg us | %% of CUDA time |\n");
  std::printf("|---|---:|---:|---:|---:|\n");
  for (size_t i = 0; i < kernels.size() && i < 10; ++i) {
    const KeyAverage& k = kernels[i];
    std::printf("| %s | %.0f | %.2f | %.1f | %.1f%% |\n", k.key.c_str(),
                static_cast<double>(k.count) / static_cast<double>(o.steps),
                k.cuda_time_total_us / 1e3 / static_cast<double>(o.steps), k.cuda_time_us(),
                cuda_us > 0.0 ? 100.0 * k.cuda_time_total_us / cuda_us : 0.0);
  }
  std::printf("\n");
}

// Runs tools/peer_gpt2_cuda.py, or tools/peer_llama_cuda.py on the config.json written to
// `dir` for a preset (its progress on stderr, one JSON object as the last line of stdout);
// nullopt, saying why, when it cannot.
std::optional<nlohmann::json> run_peer(const Options& o, const std::filesystem::path& dir) {
  const std::filesystem::path tools = std::filesystem::path(HEADROOM_SOURCE_DIR) / "tools";
  const std::string common =
      str_cat(" --json --context ", o.context, " --batch ", o.batch, " --warmup ", o.warmup,
              " --steps ", o.steps, " --seed ", kSeed, " --lr ", kLr, " --weight-decay ",
              kWeightDecay, " --modes ", o.compile ? "eager,compile" : "eager");
  const std::string command =
      o.model.empty()
          ? str_cat(o.python, " ", (tools / "peer_gpt2_cuda.py").string(), common, " --layers ",
                    o.layers, " --d-model ", o.d_model, " --heads ", o.heads, " --vocab ", o.vocab)
          : str_cat(o.python, " ", (tools / "peer_llama_cuda.py").string(), common, " --config ",
                    (dir / "model" / "config.json").string(), " --lora ", o.lora,
                    g_device.is_cuda() ? "" : " --device cpu");
  std::fflush(stdout);
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    std::printf("peer: could not start '%s'\n", command.c_str());
    return std::nullopt;
  }
  std::string last;
  char line[1 << 16];
  while (std::fgets(line, sizeof line, pipe)) last = line;
  const int status = pclose(pipe);
  try {
    nlohmann::json result = nlohmann::json::parse(last);
    if (status == 0 && result.contains("runs")) return result;
  } catch (const nlohmann::json::exception&) {
  }
  std::printf("peer: no result (exit status %d; command: %s)\n", status, command.c_str());
  return std::nullopt;
}

void print_row(const Options& o, const Result& r) {
  const double mfu = r.tokens_per_s * flops_per_token(o, r.parameters) / kPeakFlops;
  std::printf("| %-22s | %12.0f | %9.1f | %6.1f%% | %12.1f | %9.4f | %9.4f |\n", r.name.c_str(),
              r.tokens_per_s, r.step_ms, 100.0 * mfu, r.peak_allocated / kMiB, r.first_loss,
              r.last_loss);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  g_device = Device::parse(o.device);
  if (g_device.is_cuda() && !cuda_is_available()) {
    std::printf(
        "gpu_train_step: no CUDA device present (a CPU-only build, or no GPU or driver); "
        "nothing to measure\n");
    return 0;
  }
  try {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("headroom_gpu_train_step_" + std::to_string(getpid()));
    const TrainingArguments args = trainer_arguments(o, dir);
    if (o.profile) {
      run_profile(o, args);
      std::filesystem::remove_all(dir);
      return 0;
    }
    // The planner's prediction for this configuration: the same Trainer step on the meta
    // device, in the CUDA allocation pattern.
    const DryRunResult plan = dry_run_training(args, {.steps = 2, .include_eval = false});
    std::printf("plan: peak allocated %.1f MiB, peak reserved %.1f MiB (dry run in %.1f s)\n",
                static_cast<double>(plan.peak_allocated_bytes) / kMiB,
                static_cast<double>(plan.peak_reserved_bytes) / kMiB, plan.seconds);
    const Result ours = run_headroom(o, args);
    std::vector<Result> rows{ours};
    std::string torch_version = "-", gpu_name = "-", peer_model = "";
    if (o.peer) {
      if (const auto peer = run_peer(o, dir)) {
        torch_version = peer->value("torch", "?");
        gpu_name = peer->value("gpu", "?");
        if (peer->contains("model"))
          peer_model = str_cat(", peer: ", (*peer)["model"].get<std::string>());
        for (const auto& run : (*peer)["runs"]) {
          rows.push_back({.name = str_cat("torch ", run.value("mode", "?")),
                          .tokens_per_s = run.value("tokens_per_s", 0.0),
                          .step_ms = run.value("step_ms", 0.0),
                          .peak_allocated = run.value("peak_allocated_bytes", 0.0),
                          .first_loss = run.value("first_loss", 0.0),
                          .last_loss = run.value("last_loss", 0.0),
                          .parameters = run.value("parameters", int64_t{0})});
        }
      }
    }
    std::filesystem::remove_all(dir);
    std::printf(
        "\nTraining step: %s, %lld layers, d_model %lld, %lld heads, context %lld, vocab %lld, "
        "micro-batch %lld: %.2fM parameters; bf16 autocast, %s, AdamW; %lld timed steps after "
        "%lld warm-up; torch %s on %s%s\n\n",
        model_name(o).c_str(), static_cast<long long>(o.layers), static_cast<long long>(o.d_model),
        static_cast<long long>(o.heads), static_cast<long long>(o.context),
        static_cast<long long>(o.vocab), static_cast<long long>(o.batch),
        static_cast<double>(ours.parameters) / 1e6,
        o.lora > 0 ? "a bf16 frozen base and fp32 adapters" : "fp32 master weights",
        static_cast<long long>(o.steps), static_cast<long long>(o.warmup), torch_version.c_str(),
        gpu_name.c_str(), peer_model.c_str());
    std::printf("| %-22s | %12s | %9s | %7s | %12s | %9s | %9s |\n", "", "tokens/s", "step ms",
                "MFU", "peak MiB", "loss 0", "loss last");
    std::printf("|%s|%s|%s|%s|%s|%s|%s|\n", std::string(24, '-').c_str(),
                std::string(14, '-').c_str(), std::string(11, '-').c_str(),
                std::string(9, '-').c_str(), std::string(14, '-').c_str(),
                std::string(11, '-').c_str(), std::string(11, '-').c_str());
    for (const Result& r : rows) print_row(o, r);
    std::printf("| %-22s | %12s | %9s | %7s | %12.1f | %9s | %9s |\n", "headroom plan (dry run)",
                "", "", "", static_cast<double>(plan.peak_allocated_bytes) / kMiB, "", "");
    std::printf(
        "\nMFU = tokens/s x (6N + 12 L d T) / 989 TFLOP/s (H100 SXM bf16 dense; 4N with LoRA). "
        "Peak: "
        "allocated bytes of the caching allocator over the steps (torch: "
        "max_memory_allocated); the plan's figure leaves out what the GPU keeps for the "
        "process (GEMM workspaces), measured %+.1f MiB from it.\n",
        (ours.peak_allocated - static_cast<double>(plan.peak_allocated_bytes)) / kMiB);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}

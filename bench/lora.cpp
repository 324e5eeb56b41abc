// LoRA against full fine-tuning, and headroom's LoRA against PEFT on current PyTorch
// (bench/lora_peer.py): the same Llama-shaped model and batches on the CPU with the same threads,
// peak memory and step time side by side from one run. Each of the four runs is a process of its
// own, so that the resident-set peaks (what PyTorch's CPU side can be measured by) do not mix.
//
// Run (Release build):
//   ninja -C build lora && build/bench/lora [--layers 4] [--hidden 512] [--intermediate 1376]
//       [--heads 8] [--context 256] [--batch 4] [--vocab 32000] [--r 16]
//       [--targets q_proj,v_proj] [--steps 5] [--threads N] [--no-peer]
// The first 2 steps are warm-up and not timed; fp32, AdamW (lr 1e-4, no weight decay). The peer
// runs with python3 (it needs torch, transformers and peft from PyPI, e.g. in a venv), or
// $HEADROOM_PEER_PYTHON.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "bench_support.h"
#include "core/error.h"
#include "memory/device_memory.h"
#include "nn/causal_lm.h"
#include "optim/adamw.h"
#include "peft/lora_model.h"

namespace {

using namespace headroom;
using Clock = std::chrono::steady_clock;

constexpr int kWarmupSteps = 2;
constexpr uint64_t kSeed = 1234;
constexpr double kLr = 1e-4;
constexpr double kMiB = 1024.0 * 1024.0;

struct Options {
  int64_t layers = 4, hidden = 512, intermediate = 1376, heads = 8, context = 256, batch = 4;
  int64_t vocab = 32000, r = 16, steps = 5, threads = 0;
  std::string targets = "q_proj,v_proj";
  std::string only;  // "full" or "lora": this process runs that mode and prints a RESULT line
  bool peer = true;
};

Options parse_options(int argc, char** argv) {
  Options o;
  bool no_peer = false;
  bench::parse_command_line(
      "lora",
      "[--layers N] [--hidden N] [--intermediate N] [--heads N] [--context N] [--batch N] "
      "[--vocab N] [--r N] [--targets LIST] [--steps N] [--threads N] [--no-peer]",
      argc, argv, {{"--no-peer", &no_peer}}, {{"--targets", &o.targets}, {"--only", &o.only}},
      {{"--layers", &o.layers},
       {"--hidden", &o.hidden},
       {"--intermediate", &o.intermediate},
       {"--heads", &o.heads},
       {"--context", &o.context},
       {"--batch", &o.batch},
       {"--vocab", &o.vocab},
       {"--r", &o.r},
       {"--steps", &o.steps},
       {"--threads", &o.threads}});
  o.peer = !no_peer;
  return o;
}

LlamaConfig llama_config(const Options& o) {
  LlamaConfig c;
  c.vocab_size = o.vocab;
  c.hidden_size = o.hidden;
  c.intermediate_size = o.intermediate;
  c.num_hidden_layers = o.layers;
  c.num_attention_heads = o.heads;
  c.max_position_embeddings = o.context;
  return c;
}

// One mode in this process: prints its steps and a RESULT line.
void run_mode(const Options& o) {
  std::unique_ptr<CausalLM> model = make_causal_lm(llama_config(o), kCPU, kSeed);
  model->train();
  if (o.only == "lora") {
    apply_lora(*model, LoraConfig{.r = o.r,
                                  .lora_alpha = 2.0 * static_cast<double>(o.r),
                                  .target_modules = split_module_names(o.targets)});
  }
  std::vector<std::pair<std::string, Tensor>> trainable;
  int64_t trainable_count = 0;
  for (auto& [name, p] : model->named_parameters()) {
    if (p.requires_grad()) trainable.emplace_back(name, p), trainable_count += p.numel();
  }
  AdamW optimizer(trainable, {.lr = kLr, .weight_decay = 0.0});
  std::printf("headroom %s: %.2fM parameters, %.2fM trainable; %d threads\n", o.only.c_str(),
              static_cast<double>(model->num_parameters()) / 1e6,
              static_cast<double>(trainable_count) / 1e6, omp_get_max_threads());
  const size_t allocated_before = memory_allocated(kCPU);
  const size_t rss_before = bench::current_rss();
  reset_peak_memory_stats(kCPU);
  std::vector<double> times;
  double first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step < kWarmupSteps + o.steps; ++step) {
    const Tensor tokens = Tensor::from_ints(
        bench::batch_tokens(kSeed, o.batch, o.context, o.vocab, step), {o.batch, o.context + 1});
    const Tensor ids = tokens.narrow(1, 0, o.context).contiguous();
    const Tensor targets = tokens.narrow(1, 1, o.context).contiguous();
    const auto t0 = Clock::now();
    const Tensor loss = model->loss(ids, targets);
    backward(loss);
    optimizer.step();
    optimizer.zero_grad();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    last_loss = loss.item();
    if (step == 0) first_loss = last_loss;
    std::printf("headroom %s: step %lld loss %.4f %.1f ms\n", o.only.c_str(),
                static_cast<long long>(step), last_loss, seconds * 1e3);
    if (step >= kWarmupSteps) times.push_back(seconds);
  }
  const size_t peak = max_memory_allocated(kCPU);
  std::printf(
      "RESULT step_ms=%.3f peak_rss_growth_bytes=%zu peak_allocated_bytes=%zu "
      "allocated_before_bytes=%zu first_loss=%.6f last_loss=%.6f\n",
      bench::median(times) * 1e3, bench::peak_rss() - std::min(bench::peak_rss(), rss_before), peak,
      allocated_before, first_loss, last_loss);
}

std::string common_args(const Options& o) {
  return str_cat(" --layers ", o.layers, " --hidden ", o.hidden, " --intermediate ", o.intermediate,
                 " --heads ", o.heads, " --context ", o.context, " --batch ", o.batch, " --vocab ",
                 o.vocab, " --r ", o.r, " --targets ", o.targets, " --steps ", o.steps);
}

std::map<std::string, std::string> run_child(const std::string& command) {
  int status = 0;
  const auto results = bench::run_peer_command(command, status);
  if (status != 0 || results.empty()) {
    std::printf("(no result from: %s; exit status %d)\n", command.c_str(), status);
    return {};
  }
  return results.back();
}

double field(const std::map<std::string, std::string>& f, const char* key) {
  const auto it = f.find(key);
  return it == f.end() ? 0.0 : std::atof(it->second.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  if (o.threads > 0) omp_set_num_threads(static_cast<int>(o.threads));
  try {
    if (!o.only.empty()) {
      run_mode(o);
      return 0;
    }
    const std::string threads = std::to_string(omp_get_max_threads());
    setenv("OMP_NUM_THREADS", threads.c_str(), 1);
    setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 1);
    const std::string self = std::filesystem::canonical("/proc/self/exe").string();
    std::map<std::string, std::map<std::string, std::string>> ours, theirs;
    for (const char* mode : {"full", "lora"}) {
      ours[mode] =
          run_child(str_cat(self, " --only ", mode, " --threads ", threads, common_args(o)));
    }
    const char* env_python = std::getenv("HEADROOM_PEER_PYTHON");
    const std::string python = env_python ? env_python : "python3";
    const auto script = std::filesystem::path(HEADROOM_SOURCE_DIR) / "bench" / "lora_peer.py";
    const bool peer = o.peer && access(python.c_str(), X_OK) == 0;
    if (o.peer && !peer) std::printf("peer: skipped (%s missing)\n", python.c_str());
    for (const char* mode :
         peer ? std::vector<const char*>{"full", "lora"} : std::vector<const char*>{}) {
      theirs[mode] = run_child(str_cat(python, " ", script.string(), " --mode ", mode,
                                       " --threads ", threads, common_args(o)));
    }
    std::printf(
        "\nLlama %lld layers, hidden %lld, vocab %lld, batch %lld x %lld tokens, fp32 AdamW, "
        "LoRA r %lld alpha %lld on %s; %s threads; medians of %lld steps\n",
        static_cast<long long>(o.layers), static_cast<long long>(o.hidden),
        static_cast<long long>(o.vocab), static_cast<long long>(o.batch),
        static_cast<long long>(o.context), static_cast<long long>(o.r),
        static_cast<long long>(2 * o.r), o.targets.c_str(), threads.c_str(),
        static_cast<long long>(o.steps));
    std::printf("  %-22s %12s %16s %18s %12s %12s\n", "", "step ms", "peak RSS growth",
                "peak allocated", "loss first", "loss last");
    auto row = [&](const std::string& what, const std::map<std::string, std::string>& f) {
      if (f.empty()) return;
      const double allocated = field(f, "peak_allocated_bytes");
      std::printf(
          "  %-22s %12.1f %12.1f MiB %14s %12.4f %12.4f\n", what.c_str(), field(f, "step_ms"),
          field(f, "peak_rss_growth_bytes") / kMiB,
          allocated > 0 ? str_cat(static_cast<int64_t>(allocated / kMiB), " MiB").c_str() : "-",
          field(f, "first_loss"), field(f, "last_loss"));
    };
    row("headroom full", ours["full"]);
    row("headroom LoRA", ours["lora"]);
    if (peer) {
      row("torch full", theirs["full"]);
      row("PEFT LoRA", theirs["lora"]);
      if (theirs["lora"].count("peft")) {
        std::printf("  (peer: torch %s, transformers %s, peft %s)\n",
                    theirs["lora"]["torch"].c_str(), theirs["lora"]["transformers"].c_str(),
                    theirs["lora"]["peft"].c_str());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lora: %s\n", e.what());
    return 1;
  }
  return 0;
}

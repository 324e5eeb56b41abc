// Data parallel on this machine's CPU: the same `headroom train` run (same model, global batch,
// data and steps) as 1 process with 2 threads and as 2 ranks with 1 thread each under mpirun
// (DDP, ZeRO-1, ZeRO-2, ZeRO-3), side by side: tokens/s, step time, the time rank 0 waited for
// the gradient all-reduces after backward (the communication backward did not hide), per step,
// rank 0's peak allocated, and each run's first and last loss. The batches are the same; with
// dropout (the gpt2 preset has HF's 0.1) each rank draws the masks of its own half of the batch,
// so the 2-rank losses differ from the single process's from step 1 on, and agree with each
// other. The peer (bench/data_parallel_peer.py, --model gpt2 only) trains transformers'
// GPT2LMHeadModel with fp32 AdamW on the same global batch as 1 process with 2 threads, and as 2
// processes with 1 thread each over gloo with DDP and with FSDP2 (fully_shard per block, ZeRO-3's
// peer); it runs with $HEADROOM_PEER_PYTHON, else python3, when that imports torch and
// transformers (--no-peer skips it).
//
// Run (Release build; mpirun from Debian's openmpi-bin; a few minutes):
//   ninja -C build headroom_cli data_parallel && build/bench/data_parallel [--model gpt2]
//       [--context 128] [--global-batch 8] [--steps 6] [--no-peer]
// Step times are medians over the steps after the first 2; the figures come from each run's
// metrics.jsonl (per-step tokens_per_s) and trainer_state.json (train_communication_wait_seconds).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_support.h"

namespace {

namespace fs = std::filesystem;

struct Options {
  std::string model = "gpt2";
  int64_t context = 128, global_batch = 8, steps = 6;
  bool no_peer = false;
};

Options parse_options(int argc, char** argv) {
  Options o;
  headroom::bench::parse_command_line(
      "data_parallel", "[--model NAME] [--context N] [--global-batch N] [--steps N] [--no-peer]",
      argc, argv, {{"--no-peer", &o.no_peer}}, {{"--model", &o.model}},
      {{"--context", &o.context}, {"--global-batch", &o.global_batch}, {"--steps", &o.steps}});
  if (o.global_batch % 2 != 0) {
    std::fprintf(stderr, "data_parallel: --global-batch must be even (2 ranks), not %lld\n",
                 static_cast<long long>(o.global_batch));
    std::exit(2);
  }
  if (o.steps < 3) {
    std::fprintf(stderr, "data_parallel: --steps must be at least 3 (2 are warm-up), not %lld\n",
                 static_cast<long long>(o.steps));
    std::exit(2);
  }
  return o;
}

struct RunResult {
  int status = -1;
  double tokens_per_s = 0.0;   // median over the timed steps
  double wait_per_step = 0.0;  // seconds
  double first_loss = 0.0, last_loss = 0.0;
  int64_t peak_allocated = 0;  // rank 0's, over the run's steps
};

RunResult run(const std::string& command, const fs::path& output_dir) {
  std::printf("$ %s\n", command.c_str());
  std::fflush(stdout);
  RunResult r;
  r.status = std::system((command + " > " + (output_dir.string() + ".log") + " 2>&1").c_str());
  std::ifstream metrics(output_dir / "metrics.jsonl");
  std::vector<double> rates;
  int64_t steps = 0;
  for (std::string line; std::getline(metrics, line);) {
    const auto entry = nlohmann::json::parse(line);
    if (entry.contains("tokens_per_s")) {
      if (++steps > 2) rates.push_back(entry["tokens_per_s"].get<double>());
      if (steps == 1) r.first_loss = entry["loss"].get<double>();
      r.last_loss = entry["loss"].get<double>();
      r.peak_allocated = entry["peak_allocated_bytes"].get<int64_t>();
    }
  }
  // The run's summary (trainer_state.json's last log entry; metrics.jsonl has none).
  std::ifstream state(output_dir / "trainer_state.json");
  if (state && steps > 0) {
    const auto summary = nlohmann::json::parse(state)["log_history"].back();
    if (summary.contains("train_communication_wait_seconds")) {
      r.wait_per_step =
          summary["train_communication_wait_seconds"].get<double>() / static_cast<double>(steps);
    }
  }
  r.tokens_per_s = headroom::bench::median(rates);
  if (r.status != 0 || rates.empty()) {
    std::printf("  failed (exit %d); its output:\n", r.status);
    std::ifstream log(output_dir.string() + ".log");
    for (std::string line; std::getline(log, line);) std::printf("  %s\n", line.c_str());
    r.status = r.status == 0 ? 1 : r.status;
  }
  return r;
}

int main_(int argc, char** argv) {
  const Options o = parse_options(argc, argv);
  const fs::path headroom =
      fs::canonical("/proc/self/exe").parent_path().parent_path() / "headroom";
  if (!fs::exists(headroom)) {
    std::fprintf(stderr, "data_parallel: no %s (ninja -C build headroom_cli)\n", headroom.c_str());
    return 2;
  }
  const fs::path work =
      fs::temp_directory_path() / ("headroom_dp_bench_" + std::to_string(getpid()));
  fs::create_directories(work);
  const std::string data = std::string(HEADROOM_SOURCE_DIR) + "/README.md";
  const int64_t tokens_per_step = o.global_batch * o.context;
  auto train_args = [&](int64_t per_device, const fs::path& out) {
    return headroom.string() + " train --model " + o.model + " --data " + data +
           " --device cpu --max_seq_length " + std::to_string(o.context) +
           " --per_device_train_batch_size " + std::to_string(per_device) + " --max_steps " +
           std::to_string(o.steps) +
           " --logging_steps 1 --save_strategy no --sample_max_new_tokens 0 --disable_tqdm"
           " --validation_split_percentage 0 --seed 7 --output_dir " +
           out.string();
  };
  const std::string mpirun = std::string("mpirun -np 2 --oversubscribe --bind-to none ") +
                             (geteuid() == 0 ? "--allow-run-as-root " : "") +
                             "-x OMP_NUM_THREADS=1 ";
  struct Row {
    std::string name;
    RunResult result;
  };
  std::vector<Row> rows;
  rows.push_back(
      {"1 process x 2 threads",
       run("OMP_NUM_THREADS=2 " + train_args(o.global_batch, work / "single"), work / "single")});
  for (int stage = 0; stage <= 3; ++stage) {
    const fs::path out = work / ("zero" + std::to_string(stage));
    const std::string name = stage == 0 ? "DDP" : "ZeRO-" + std::to_string(stage);
    rows.push_back(
        {"2 ranks x 1 thread, " + name, run(mpirun + train_args(o.global_batch / 2, out) +
                                                " --zero_stage " + std::to_string(stage),
                                            out)});
  }
  std::printf(
      "\n%s, %lld x %lld tokens a step (global), %lld steps, fp32 AdamW; medians over "
      "steps 3-%lld\n",
      o.model.c_str(), static_cast<long long>(o.global_batch), static_cast<long long>(o.context),
      static_cast<long long>(o.steps), static_cast<long long>(o.steps));
  std::printf("  %-30s %10s %9s %21s %10s %12s %12s\n", "", "tokens/s", "step ms",
              "all-reduce wait/step", "peak MiB", "loss step 1", "last loss");
  int status = 0;
  for (const Row& row : rows) {
    const RunResult& r = row.result;
    if (r.status != 0) {
      std::printf("  %-30s failed\n", row.name.c_str());
      status = 1;
      continue;
    }
    std::printf("  %-30s %10.1f %9.1f %18.1f ms %10.1f %12.7f %12.7f\n", row.name.c_str(),
                r.tokens_per_s, 1000.0 * static_cast<double>(tokens_per_step) / r.tokens_per_s,
                1000.0 * r.wait_per_step, static_cast<double>(r.peak_allocated) / (1 << 20),
                r.first_loss, r.last_loss);
  }
  fs::remove_all(work);
  if (o.no_peer) return status;
  if (o.model != "gpt2") {
    std::printf("peer: skipped (it builds gpt2 only)\n");
    return status;
  }
  const char* env_python = std::getenv("HEADROOM_PEER_PYTHON");
  const std::string python = env_python ? env_python : "python3";
  int peer_status = 0;
  const auto peer = headroom::bench::run_peer_command(
      python + " " + HEADROOM_SOURCE_DIR + "/bench/data_parallel_peer.py --context " +
          std::to_string(o.context) + " --global-batch " + std::to_string(o.global_batch) +
          " --steps " + std::to_string(o.steps),
      peer_status);
  if (peer.empty()) {
    std::printf("peer: no result (exit status %d; it needs torch and transformers)\n", peer_status);
    return status;
  }
  const std::map<std::string, std::string> names = {{"single", "PyTorch 1 process x 2 threads"},
                                                    {"ddp", "PyTorch 2 ranks x 1 thread, DDP"},
                                                    {"fsdp", "PyTorch 2 ranks x 1 thread, FSDP2"}};
  std::printf("\nthe peer, transformers' GPT2LMHeadModel, the same batch and steps:\n");
  std::printf("  %-33s %10s %9s\n", "", "tokens/s", "step ms");
  for (const auto& fields : peer) {
    const auto mode = names.find(fields.count("mode") ? fields.at("mode") : "");
    if (mode == names.end() || !fields.count("tokens_per_s") || !fields.count("step_ms")) continue;
    std::printf("  %-33s %10s %9s\n", mode->second.c_str(), fields.at("tokens_per_s").c_str(),
                fields.at("step_ms").c_str());
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) { return main_(argc, argv); }

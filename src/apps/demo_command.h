// `headroom demo`: the main job until training lands. It allocates the training state of a
// GPT-2-shaped model (weights, gradients, AdamW moments, one micro-batch's logits) on a device,
// computes nothing, and prints where the memory went and the allocator's memory summary.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace headroom {

struct DemoOptions {
  std::string device = "cpu";
  int layers = 12;
  int64_t d_model = 768;
  int64_t vocab = 50304;
  int64_t context = 1024;
  int64_t batch = 8;
  std::string memory_limit;  // e.g. "24GiB"; empty = none
  std::string snapshot;      // memory_viz pickle path; empty = none
  bool abbreviated = false;
  bool empty_cache = false;  // return the cache (torch.cuda.empty_cache) before the summary
};

// Registers the subcommand and its options; run_demo runs it once parsed.
CLI::App* add_demo_command(CLI::App& app, DemoOptions& options);
int run_demo(const DemoOptions& options);

}  // namespace headroom

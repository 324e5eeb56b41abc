// `headroom plan`: the memory of a training run (or of inference) before it starts, by dry run
// on the meta device, with the same options as `headroom train`; with --gpu / --gpu-memory also
// the search for the configurations that fit (plan/).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace headroom {

struct PlanOptions {
  bool json = false;
  bool kernels = false;    // --kernels: the step's kernel census (plan/step_kernels.h)
  std::string gpu;         // a GPU name (plan/gpu_specs.h)
  std::string gpu_memory;  // "24GiB"
  bool inference = false;
  bool no_search = false;
  bool max_context = false;       // the longest max_seq_length that fits each --gpu card
  std::string search_precisions;  // comma lists; empty: all
  std::string search_optims;
  std::string search_policies;
  std::string search_adapters;
  std::string search_allocators;
  std::string search_zero_stages;
  int64_t max_results = 20;
  int steps = 2;
  int world_size = 1;  // data-parallel ranks planned (one GPU each)
};

CLI::App* add_plan_command(CLI::App& app, PlanOptions& options);
// The plan of the parsed command's configuration on stdout (text or one JSON object).
int run_plan_command(const CLI::App& plan, const PlanOptions& options);

}  // namespace headroom

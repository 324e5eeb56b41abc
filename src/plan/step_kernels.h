// A training step's kernel census as `headroom plan --kernels` shows it: launches, bytes and
// FLOPs per kernel family and per distinct launch, with each one's roofline time on a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/kernel_census.h"
#include "plan/gpu_specs.h"

namespace headroom {

// Note [Step roofline]
// A launch's roofline time is max(FLOPs / peak, bytes / bandwidth) on the target GPU: the 16-bit
// tensor-core peak for bf16 / fp16 operands, twice it for FP8 (Hopper's rate), the fp32 peak for
// fp32, memory bandwidth for the bytes. A transfer between the host and the device crosses the
// host link instead (GpuSpec::host_link_gb_per_s). The step's roofline is the sum over its
// launches: no launch overlaps another, none waits, so a real step is slower, by as much as the
// kernels fall short of their roofline and the host of keeping the GPU fed. Launches on the CPU
// (the host's share of a step) are no GPU kernels and are left out.
// A dry run that cut a step's gradient accumulation to two micro-batches (the configuration
// search) counts the remaining ones as repeats of the last one it ran, which each of them is.

// The least time a launch takes: the rate one host thread issues kernels at (Note [Step time
// estimate] in plan/step_cost.h).
inline constexpr double kLaunchSeconds = 4e-6;

// A step's census: the launches of one optimizer step, with the micro-batch that stands for the
// ones not run.
struct StepCensus {
  std::vector<KernelLaunch> launches;
  size_t repeat_begin = 0, repeat_end = 0;  // the last micro-batch run: launches[begin, end)
  int64_t repeats = 0;                      // micro-batches of the step not run
  bool empty() const { return launches.empty(); }
  // The census of `census`'s launches, with `per_step` micro-batches in a real step.
  static StepCensus of(const KernelCensus& census, int64_t per_step);
};

// Launches that look the same: one family and entry, one GEMM / attention shape, one precision.
struct KernelRow {
  std::string family, entry, shape;
  FlopPrecision precision = FlopPrecision::none;
  int64_t launches = 0, bytes = 0, host_syncs = 0, strided_copies = 0;
  double flops = 0.0, seconds = 0.0;  // seconds: the roofline's (Note [Step roofline])
};

struct StepKernels {
  std::string gpu;                  // the GpuSpec's name the roofline is for
  std::vector<KernelRow> rows;      // each distinct launch, in order of first appearance
  std::vector<KernelRow> families;  // per family (entry and shape empty), likewise
  KernelRow total;
  // What launches shorter than kLaunchSeconds add to the roofline: sum of max(0, kLaunchSeconds
  // - roofline) over the device's kernels (transfers run on the copy engine).
  double launch_seconds = 0.0;
  // {"gpu", "launches_per_step", "host_syncs_per_step", "strided_copies_per_step",
  //  "bytes_per_step", "flops_per_step", "roofline_ms", "families": {name: {...}}}.
  nlohmann::ordered_json to_json() const;
  // The table --kernels prints: a row per family and the total, then the `top` launches by
  // roofline time.
  std::string format(size_t top = 12) const;
};

// One launch's roofline seconds on `gpu` (Note [Step roofline]).
double roofline_seconds(const KernelLaunch& launch, const GpuSpec& gpu);

StepKernels summarize_step_kernels(const StepCensus& census, const GpuSpec& gpu);

}  // namespace headroom

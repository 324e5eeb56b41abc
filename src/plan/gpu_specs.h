// The GPUs `headroom plan --gpu NAME` knows: the memory a process can use, the memory CUDA itself
// takes before the first tensor (context and library workspaces, per GPU family), and the peak
// rates the step-time estimate divides by.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace headroom {

// Note [CUDA overhead per GPU family]
// What a CUDA process holds that no dry run sees: the CUDA context (the driver's per-process
// state, module images loaded lazily since CUDA 11.7 / 12.2: 300-700 MB in practice) and
// headroom's cuBLASLt workspace (32 MiB per GEMM stream, allocated by the caching allocator at
// the first GEMM: Note [cuBLASLt workspace]). Hopper's context is measured: on an H200 (CUDA
// 13.0, driver 580.159, 2026-11-28; scripts/gpu_memory_grid, bench/results/
// 2026-11-28-gpu-check.md) every row of the plan grid used 531-533 MiB beyond its peak reserved,
// and reserved 2 MiB beyond the dry run's reserve plus the workspace (a small-pool segment the
// dry run does not open): 544 MiB covers both. The other families' contexts are the upper part
// of the range reported for them, so a plan errs towards fitting less, until measured.
struct GpuFamily {
  const char* name;         // "hopper", "ampere", ...
  int64_t context_bytes;    // the CUDA context
  int64_t workspace_bytes;  // cuBLAS / cuBLASLt workspaces
  int64_t overhead_bytes() const { return context_bytes + workspace_bytes; }
};

struct GpuSpec {
  std::string name;  // as --gpu takes it: "H100-80GB", "RTX4090", ...
  GpuFamily family;
  int64_t memory_bytes;       // total_memory as torch.cuda.get_device_properties reports it
  double bf16_tflops;         // dense tensor-core peak with fp32 accumulation (datasheet)
  double fp32_tflops;         // plain fp32 (PyTorch's default: TF32 off for matmuls)
  double memory_tb_per_s;     // HBM / GDDR bandwidth
  double host_link_gb_per_s;  // to host memory, one direction: PCIe x16 (Gen5 64, Gen4 32, Gen3 16)
  bool has_bf16;              // Volta and Turing have no bf16: their search offers fp16 only
};

// Every known GPU, in the order --help lists them.
const std::vector<GpuSpec>& gpu_specs();

// The GPU called `name` (case and '-', '_', ' ' ignored: "h100", "H100_80GB"); ValueError
// listing the known names otherwise.
const GpuSpec& find_gpu_spec(std::string_view name);

// The family a CUDA target of unknown model is taken to be (Hopper: the GPUs headroom targets).
const GpuFamily& default_gpu_family();

}  // namespace headroom

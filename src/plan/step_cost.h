// The search's ordering: a simple estimate of one optimizer step's time on a GPU from the work
// it does (FLOPs of forward, backward and recompute; bytes the optimizer moves; per-micro-batch
// launch overhead). It ranks configurations; it is not a benchmark.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "nn/model_config.h"
#include "plan/gpu_specs.h"
#include "train/training_arguments.h"

namespace headroom {

// Note [Step time estimate]
// FLOPs per token: forward 2N + 4*L*d*T (the matmuls, then attention's scores and values:
// PaLM appendix B's 6N + 12*L*d*T split 1 : 2 between forward and backward). Recompute adds a
// forward per checkpointed block: all of it for full / every_N blocks, for selective only the
// attention core (4*d*T per token and layer) since the projections are kept. LOMO with
// max_grad_norm runs forward and backward twice. A frozen base (LoRA, QLoRA) computes no
// weight gradients: its matmuls' backward is dX only, so the matmuls cost 2N x 2 per token
// instead of 2N x 3 (the adapters' own FLOPs are negligible). Compute time = FLOPs / (peak x kModelFlopsUtilization),
// at the 16-bit tensor-core peak for autocast and pure bf16, at the fp32 peak for fp32.
// Optimizer time: bytes read and written per parameter (weights, gradient and state, read and
// written back) / memory bandwidth. Launch overhead: kKernelsPerBlock kernels per block and
// micro-batch at kLaunchSeconds each, which is what makes many small micro-batches slower.
// Offload (Note [Optimizer offload], Note [Activation offload]): what moves between the device
// and the host pool in a step crosses the card's host link (GpuSpec::host_link_gb_per_s) once,
// charged in full (no overlap assumed), and an offloaded optimizer streams its host state
// through host memory at kHostBytesPerSecond, an assumed 40 GB/s for one GPU's share of a
// server's memory bandwidth, instead of the GPU's.
inline constexpr double kHostBytesPerSecond = 40e9;
inline constexpr double kModelFlopsUtilization = 0.45;
inline constexpr double kKernelsPerBlock = 60.0;
inline constexpr double kLaunchSeconds = 4e-6;

struct StepCost {
  double model_flops = 0.0;      // forward + backward
  double recompute_flops = 0.0;  // checkpointing's extra forward work (and LOMO's second pass)
  double optimizer_bytes = 0.0;
  double compute_seconds = 0.0;
  double optimizer_seconds = 0.0;
  double overhead_seconds = 0.0;
  double host_transfer_bytes = 0.0;     // offload's traffic over the host link
  double host_transfer_seconds = 0.0;
  double host_optimizer_seconds = 0.0;  // the offloaded optimizer's step on the host
  double seconds() const {
    return compute_seconds + optimizer_seconds + overhead_seconds + host_transfer_seconds +
           host_optimizer_seconds;
  }
  nlohmann::ordered_json to_json() const;
};

// The estimate for training `config` with `args` (batch, accumulation, max_seq_length,
// checkpointing, precision as `sixteen_bit`, optim) on `gpu`; `num_parameters` unique
// parameters whose weights, gradients and optimizer state take `state_bytes` in all on the
// device; with offload, `host_transfer_bytes` cross the host link per step and the optimizer's
// `host_state_bytes` live on the host.
StepCost estimate_step_cost(const HfConfig& config, const TrainingArguments& args,
                            bool sixteen_bit, int64_t num_parameters, int64_t state_bytes,
                            const GpuSpec& gpu, int64_t host_transfer_bytes = 0,
                            int64_t host_state_bytes = 0);

}  // namespace headroom

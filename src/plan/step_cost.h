// The search's ordering: a simple estimate of one optimizer step's time on a GPU from the work
// it does (FLOPs of forward, backward and recompute; bytes the optimizer moves; per-micro-batch
// launch overhead). It ranks configurations; it is not a benchmark.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "nn/model_config.h"
#include "plan/gpu_specs.h"
#include "plan/step_kernels.h"
#include "train/training_config.h"

namespace headroom {

// Note [Step time estimate]
// The step's kernel census (plan/step_kernels.h, Note [Step roofline]): each launch takes its
// roofline time on the GPU, and at least kLaunchSeconds, the rate a host thread issues kernels
// at, so that many small launches (small micro-batches, unfused ops) cost what they do. The dry
// run ran the step's recompute, LOMO's second pass and its optimizer, so they are in the census.
// Offload (Note [Optimizer offload], Note [Activation offload]): what moves between the device
// and the host pool in a step crosses the card's host link (GpuSpec::host_link_gb_per_s) once,
// charged in full (no overlap assumed), and an offloaded optimizer streams its host state
// through host memory at kHostBytesPerSecond, an assumed 40 GB/s for one GPU's share of a
// server's memory bandwidth, instead of the GPU's.
// The FLOPs of the model are reported beside it (for MFU), as PaLM's appendix B counts them per
// token: forward 2N + 4*L*d*T (the matmuls, then attention's scores and values), backward twice
// that, or for a frozen base (LoRA, QLoRA) the matmuls' dX only (2N); recompute adds a forward per
// checkpointed block (for selective only the attention core, 4*d*T per token and layer); LOMO
// with max_grad_norm runs forward and backward twice.
inline constexpr double kHostBytesPerSecond = 40e9;

struct StepCost {
  double model_flops = 0.0;          // forward + backward
  double recompute_flops = 0.0;      // checkpointing's extra forward work (and LOMO's second pass)
  int64_t launches = 0;              // the census's, on the device
  double roofline_seconds = 0.0;     // the launches' roofline (Note [Step roofline])
  double launch_seconds = 0.0;       // what launches shorter than kLaunchSeconds add
  double host_transfer_bytes = 0.0;  // offload's traffic over the host link
  double host_transfer_seconds = 0.0;
  double host_optimizer_seconds = 0.0;  // the offloaded optimizer's step on the host
  double seconds() const {
    return roofline_seconds + launch_seconds + host_transfer_seconds + host_optimizer_seconds;
  }
  nlohmann::ordered_json to_json() const;
};

// The estimate for training `config` as `run` resolves it (batch, accumulation, max_seq_length,
// checkpointing, optimizer) on `gpu`, whose step launches `kernels` (the dry run's census); with
// `num_parameters` unique parameters; with offload, `host_transfer_bytes` cross the host link
// per step and the optimizer's `host_state_bytes` live on the host.
StepCost estimate_step_cost(const HfConfig& config, const TrainingConfig& run,
                            int64_t num_parameters, const StepKernels& kernels, const GpuSpec& gpu,
                            int64_t host_transfer_bytes = 0, int64_t host_state_bytes = 0);
// The same for `args` (resolve_training_config).
StepCost estimate_step_cost(const HfConfig& config, const TrainingArguments& args,
                            int64_t num_parameters, const StepKernels& kernels, const GpuSpec& gpu,
                            int64_t host_transfer_bytes = 0, int64_t host_state_bytes = 0);

}  // namespace headroom

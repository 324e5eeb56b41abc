// Note [Step time estimate], term by term.
#include "plan/step_cost.h"

#include "memsave/checkpoint_policy.h"
#include "nn/model_presets.h"

namespace headroom {

nlohmann::ordered_json StepCost::to_json() const {
  return {{"seconds", seconds()},
          {"roofline_seconds", roofline_seconds},
          {"launch_seconds", launch_seconds},
          {"launches", launches},
          {"model_flops", model_flops},
          {"recompute_flops", recompute_flops},
          {"host_transfer_bytes", host_transfer_bytes},
          {"host_transfer_seconds", host_transfer_seconds},
          {"host_optimizer_seconds", host_optimizer_seconds}};
}

StepCost estimate_step_cost(const HfConfig& config, const TrainingConfig& run,
                            int64_t num_parameters, const StepKernels& kernels, const GpuSpec& gpu,
                            int64_t host_transfer_bytes, int64_t host_state_bytes) {
  const TrainingArguments& args = run.args;
  StepCost cost;
  const ModelDims d = model_dims(config);
  const auto layers = static_cast<double>(d.layers);
  const auto t = static_cast<double>(args.max_seq_length.value_or(context_length(config)));
  const double micro_batches = static_cast<double>(args.gradient_accumulation_steps);
  const double tokens = static_cast<double>(args.per_device_train_batch_size) * t * micro_batches;
  const auto n = static_cast<double>(num_parameters);
  // Scores and values over all query heads (Llama's head_dim x heads may differ from hidden).
  const double attention_forward =
      4.0 * layers * static_cast<double>(d.heads * d.head_dim) * t;  // per token
  const double forward = 2.0 * n + attention_forward;                // per token
  // Backward: twice the forward (dX and dW), or for a frozen base's matmuls only dX.
  const double backward = args.use_peft ? 2.0 * n + 2.0 * attention_forward : 2.0 * forward;
  cost.model_flops = (forward + backward) * tokens;

  const CheckpointPolicy policy = run.checkpointing.value_or(CheckpointPolicy{});
  double recomputed_blocks = 0.0;
  for (int64_t l = 0; l < d.layers; ++l) recomputed_blocks += policy.checkpoints_block(l) ? 1 : 0;
  const double block_share = layers > 0 ? recomputed_blocks / layers : 0.0;
  if (policy.kind == CheckpointPolicy::Kind::selective) {
    cost.recompute_flops = attention_forward * tokens;
  } else {
    cost.recompute_flops = forward * block_share * tokens;
  }
  int passes = 1;
  // LOMO clips with a first backward that measures the norm (Note [LOMO backward passes]).
  if (run.updates_in_backward() && args.max_grad_norm > 0.0) passes = 2;
  cost.recompute_flops += (passes - 1) * (cost.model_flops + cost.recompute_flops);

  cost.launches = kernels.total.launches;
  cost.roofline_seconds = kernels.total.seconds;
  cost.launch_seconds = kernels.launch_seconds;
  cost.host_transfer_bytes = static_cast<double>(host_transfer_bytes);
  cost.host_transfer_seconds = cost.host_transfer_bytes / (gpu.host_link_gb_per_s * 1e9);
  cost.host_optimizer_seconds = 2.0 * static_cast<double>(host_state_bytes) / kHostBytesPerSecond;
  return cost;
}

StepCost estimate_step_cost(const HfConfig& config, const TrainingArguments& args,
                            int64_t num_parameters, const StepKernels& kernels, const GpuSpec& gpu,
                            int64_t host_transfer_bytes, int64_t host_state_bytes) {
  return estimate_step_cost(config, resolve_training_config(args), num_parameters, kernels, gpu,
                            host_transfer_bytes, host_state_bytes);
}

}  // namespace headroom

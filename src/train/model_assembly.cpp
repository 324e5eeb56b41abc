// assemble_model: the model half of a run's setup, in the order the pieces need.
#include "train/model_assembly.h"

#include <cstdio>
#include <filesystem>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "nn/model_presets.h"
#include "core/generator.h"
#include "dist/zero_optimizer.h"
#include "dist/zero_parameters.h"
#include "io/pretrained.h"
#include "memsave/activation_offload.h"
#include "memsave/checkpoint_policy.h"
#include "memsave/param_offload.h"
#include "memsave/tiled_mlp.h"
#include "nn/linear_fp8.h"
#include "peft/lora_model.h"
#include "train/model_source.h"

namespace headroom {

namespace fs = std::filesystem;

AssembledModel assemble_model(const TrainingConfig& config, RankPosition position) {
  const TrainingArguments& args = config.args;
  const PrecisionRecipe& recipe = config.recipe;
  AssembledModel out;
  manual_seed(static_cast<uint64_t>(args.seed));
  // Each weight is made in the recipe's dtype (a 4-bit base layer quantized as it is made), so
  // no full-precision copy of the model exists (Note [Materializing one tensor at a time]).
  // A directory saved in 4 bits loads 4-bit whatever the options; its weights have no gradient,
  // so only adapters can train on it (transformers' Trainer refuses "purely quantized models"
  // too). Accepted, the run would train the rest and save checkpoints no resume could read.
  if (const fs::path config = fs::path(args.model) / "config.json";
      !args.use_peft && fs::is_regular_file(config) && read_quantization_config(config.string())) {
    throw ValueError(str_cat(config.string(),
                             ": quantization_config: the model is saved in 4 "
                             "bits, and full fine-tuning cannot update 4-bit weights; add "
                             "--use_peft to train LoRA adapters on it"));
  }
  LoadOptions load;
  load.dtype = recipe.param_dtype;
  load.load_in_4bit = config.quant_4bit;
  // LoRA under autocast: the frozen projections are made in the compute dtype at once (Note [A
  // frozen base in the compute dtype]), never in the fp32 of the master weights.
  const bool frozen_in_compute = args.use_peft && recipe.autocast_dtype && !load.load_in_4bit;
  if (frozen_in_compute) {
    load.frozen_linear_dtype = *recipe.autocast_dtype;
    load.keep_modules = split_module_names(args.lora_modules_to_save);
  }
  const bool data_parallel = position.world_size > 1;
  if (config.offload.params && !data_parallel) {
    // The blocks are made in the host pool, their home under offload, never all on the device.
    load.in_host_pool = [](const CausalLM& meta) {
      return [&meta](const std::string& name) { return is_block_parameter(meta, name); };
    };
    load.pin_memory = config.offload.pin_memory;
  }
  const int64_t zero_stage = data_parallel ? config.zero_stage : 0;
  if (zero_stage >= 3 && !args.use_peft && !load.load_in_4bit) {
    // ZeRO-3's sharded load: each rank makes the block parameters it will own and the rest of
    // the model, never the whole (Note [ZeRO-3 parameter sharding]). The owners are the
    // optimizer's partition of every parameter, which shard_parameters checks.
    const int rank = position.rank, world = position.world_size;
    load.keep_parameter = [rank, world](const CausalLM& meta) {
      std::vector<std::string> names;
      std::vector<Tensor> tensors;
      for (const auto& [name, p] : meta.named_parameters()) {
        names.push_back(name);
        tensors.push_back(p);
      }
      const std::vector<int> owners = partition_parameters(tensors, world);
      std::unordered_set<std::string> others;
      for (size_t i = 0; i < names.size(); ++i) {
        if (owners[i] != rank && is_block_parameter(meta, names[i])) others.insert(names[i]);
      }
      return
          [others = std::move(others)](const std::string& name) { return others.count(name) == 0; };
    };
  }
  ModelAndTokenizer loaded =
      load_model_and_tokenizer(args.model, config.device, static_cast<uint64_t>(args.seed), load);
  // Rank 0 alone reads the base's files for their checksums: it writes the record, and a resume
  // it refuses ends every rank (run_training).
  if (args.use_peft && position.rank == 0) {
    out.adapter_base = describe_adapter_base(args.model, static_cast<uint64_t>(args.seed), load);
  }
  out.model = std::move(loaded.model);
  out.tokenizer = std::move(loaded.tokenizer);
  CausalLM& model = *out.model;
  const int64_t context = context_length(model.config());
  const int64_t t = args.max_seq_length.value_or(context);
  check_max_seq_length(model.config(), t);
  if (t > context && config.device.type != DeviceType::meta && position.rank == 0) {
    std::fprintf(stderr,
                 "headroom: warning: max_seq_length %lld is past the model's context length %lld "
                 "(max_position_embeddings): positions it was not trained on\n",
                 static_cast<long long>(t), static_cast<long long>(context));
  }
  out.window = t + 1;
  // The adapters in the recipe's parameter dtype (fp32 under autocast, as PEFT's); the rest is
  // already in it, but for the frozen projections made in the compute dtype.
  if (config.lora) apply_lora(model, *config.lora, nullptr, recipe.param_dtype);
  if (!frozen_in_compute) model.to(recipe.param_dtype);
  if (config.lora && recipe.autocast_dtype) {
    // See Note [A frozen base in the compute dtype].
    store_frozen_projections(model, *recipe.autocast_dtype);
  }
  // TE's te.Linear for the projections (not lm_head), after LoRA: the frozen base computes in
  // FP8, the adapters in the recipe's precision.
  if (config.fp8) {
    out.fp8 = std::make_unique<Fp8Training>(*config.fp8, args.fp8_save_original_input);
    // On the compute device: with --offload_params the blocks' weights are in the host pool
    // by now, and their FP8 states (scales, amax histories) do not move with them.
    enable_fp8_linears(model, *out.fp8, config.device);
  }
  model.train();
  // HF's activate_neftune: the noise is the input embedding's, in training mode only, so that
  // evaluate() (eval mode) scores the model without it.
  if (args.neftune_noise_alpha > 0.0) {
    model.input_embeddings().set_neftune_noise_alpha(args.neftune_noise_alpha);
  }
  // HF's gradient_checkpointing_enable(), with the policy (memsave) the option names.
  if (config.checkpointing) enable_gradient_checkpointing(model, *config.checkpointing);
  // After checkpointing, which sets the runners afresh.
  if (config.mlp_tile_tokens) enable_tiled_mlp(model, *config.mlp_tile_tokens);
  out.offload = config.offload;
  if (data_parallel && out.offload.params) {
    throw NotImplementedError(str_cat("offload_params with ", position.world_size,
                                      " data-parallel ranks is not supported yet; offload it on "
                                      "one rank (offload_optimizer and offload_activations work "
                                      "with data parallel; zero_stage 3 shards the parameters)"));
  }
  if (out.offload.params) {
    // The weights on the host, and their optimizer with them (FSDP's CPU offload).
    enable_parameter_offload(model, config.device, {.pin_memory = out.offload.pin_memory});
    out.offload.optimizer = true;
  }
  // Outside the checkpointing runner: with checkpointing, the checkpoint inputs go to the host.
  if (out.offload.activations) {
    enable_activation_offload(model, config.device, {.pin_memory = out.offload.pin_memory});
  }
  return out;
}

}  // namespace headroom

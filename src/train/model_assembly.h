// The model a run trains, assembled from its typed config: loaded (a preset or an HF directory)
// in the recipe's dtypes, quantized to 4 bits, adapters, FP8 layers, NEFTune, checkpointing,
// offload, and under ZeRO-3 only the block parameters this rank owns.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "io/tokenizer.h"
#include "nn/causal_lm.h"
#include "quant/fp8_linear.h"
#include "train/adapter_base.h"
#include "train/training_config.h"

namespace headroom {

struct AssembledModel {
  std::unique_ptr<CausalLM> model;  // on config.device, in training mode
  std::unique_ptr<Tokenizer> tokenizer;
  // With LoRA, on rank 0: the base the adapters train on (Note [The base of an adapter]).
  std::optional<AdapterBase> adapter_base;
  std::unique_ptr<Fp8Training> fp8;  // with fp8: the FP8 layers' scales and weight copies
  OffloadSettings offload;           // config.offload, offload_params taking the optimizer with it
  int64_t window = 0;  // max_seq_length + 1 tokens (max_seq_length unset: the context)
};

// This process's place in a data-parallel run ({0, 1}: a single process).
struct RankPosition {
  int rank = 0;
  int world_size = 1;
};

// The model `config` trains, seeded by its seed. ValueError naming the option or file: a
// directory saved in 4 bits without use_peft, max_seq_length beyond the model's context;
// NotImplementedError for offload_params over several ranks.
AssembledModel assemble_model(const TrainingConfig& config, RankPosition position = {});

}  // namespace headroom

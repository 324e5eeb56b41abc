// Scoring a causal LM on token batches: the Trainer's evaluate() and `headroom eval`.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "core/device.h"
#include "nn/causal_lm.h"
#include "train/adapter_base.h"
#include "train/batch_source.h"
#include "train/sft_preparation.h"

namespace headroom {

struct EvalResult {
  double loss = 0.0;        // mean cross-entropy over the scored targets
  double perplexity = 0.0;  // exp(loss)
  int64_t tokens = 0;       // scored targets
};

// `headroom eval`: the data's token stream cut, in order, into consecutive windows of
// max_seq_length + 1 tokens (the incomplete tail dropped), or, for rows (is_row_data), each row
// prepared as TRL prepares it with `rows`' options and truncated to max_seq_length; scored in
// fp32 by the model `base` asks for (a preset or a model directory, resolve_adapter_base) in
// batches of `batch_size` windows or rows, the loss the mean over every scored target (as
// transformers' num_items_in_batch weighs it). max_seq_length <= 0: the model's context.
// ValueError naming the data when it holds less than one window, or no row with a scored token.
// `adapter`: a directory with a PEFT LoRA adapter (adapter_config.json +
// adapter_model.safetensors) applied to the model first, made as its adapter_base.json
// records (Note [The base of an adapter]); empty: none.
EvalResult evaluate_file(const AdapterBaseRequest& base, const std::string& data,
                         int64_t max_seq_length, int64_t batch_size,
                         const std::string& device = "auto", const std::string& adapter = "",
                         const SftRowOptions& rows = {});

// Mean cross-entropy over every target of `count` batches (batch_at(i)), weighted by their token
// counts, in eval mode and no_grad, under `autocast_dtype` when set; the model's mode restored.
EvalResult evaluate_batches(CausalLM& model, int64_t count,
                            const std::function<TokenBatch(int64_t)>& batch_at, Device device,
                            std::optional<DType> autocast_dtype);

}  // namespace headroom

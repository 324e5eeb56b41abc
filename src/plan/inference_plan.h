// `headroom plan --inference`: the memory of serving the model: its weights, the KV cache for a
// batch of full contexts, and the prefill's activations.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "plan/training_plan.h"

namespace headroom {

// Note [Inference memory]
// weights: the model built on the meta device in the recipe's dtype (fp32 for fp32, bf16 for
// bf16 and pure_bf16, f16 for fp16), as a model loaded with that torch_dtype holds them.
// kv_cache: HF's cache layout, a K and a V tensor per layer: 2 x layers x kv_heads x head_dim x
// context x batch x bytes of the dtype. It is a formula: headroom's generate() recomputes the
// context instead of caching it, so no dry run of the cache exists yet.
// prefill: the dry run of one no-grad forward over [batch, context] (the prompt), as peak
// allocated above the weights: its K / V of one layer at a time are counted there as well as in
// the cache, so the total errs by at most one layer's K and V towards more.
// headroom builds a model in fp32 and then converts it; that build peak is reported but not
// counted in `required`, since serving loads the weights in their dtype (HF's torch_dtype).
struct InferencePlan {
  PlanTarget target;
  std::string model;
  std::string dtype;
  int64_t batch = 0;
  int64_t context = 0;
  int64_t num_parameters = 0;
  int64_t weight_bytes = 0;
  int64_t kv_cache_bytes = 0;
  int64_t prefill_bytes = 0;  // peak allocated above the weights
  int64_t prefill_peak_reserved_bytes = 0;
  int64_t load_peak_reserved_bytes = 0;  // the fp32 build and conversion
  int64_t required_bytes = 0;            // reserved peak + KV cache + CUDA overhead
  double seconds = 0.0;

  bool fits() const {
    return target.capacity_bytes == 0 || required_bytes <= target.capacity_bytes;
  }
  nlohmann::ordered_json to_json() const;
  std::string format() const;
};

// For args.model in the dtype of args' precision, batch per_device_eval_batch_size and context
// max_seq_length (unset: the model's context length).
InferencePlan plan_inference(const TrainingArguments& args, const PlanTarget& target);

}  // namespace headroom

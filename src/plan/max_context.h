// `headroom plan --max_context`: the longest max_seq_length whose plan fits a card, for the
// options as given and with the memory savers that leave the model's results as they are.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/training_plan.h"

namespace headroom {

// Note [The longest context that fits]
// The plan's fit (Note [Planning under the card's capacity]) grows with max_seq_length, so the
// longest that fits is found by dry runs: doubling from 1,024 tokens until one does not fit,
// then bisecting down to 128 tokens (13 more for 700k), each dry run a plan as `headroom plan
// --gpu CARD --no-search` makes it, so the command printed re-plans to the same figures. The
// memory savers tried beside the options as given are those that change no number a step
// computes beyond the order of a sum: full checkpointing (unless a policy is given), the tiled
// MLP, offloaded checkpoint inputs and expandable segments. The recipe, LoRA's dropout and the
// batch are the user's choices and stay as given. A model with learned positions (GPT-2) stops
// at them; rotary models are planned past their context length (Note in nn/model_presets.h).
struct MaxContext {
  std::string techniques;            // "as given", or the savers added
  TrainingArguments args;            // with max_seq_length the longest that fits
  std::optional<TrainingPlan> plan;  // its plan; unset when not even 16 tokens fit
  int64_t dry_runs = 0;

  int64_t max_seq_length() const { return plan ? args.max_seq_length.value_or(0) : 0; }
};

// `args` with the memory savers of Note [The longest context that fits] turned on; `added`
// told which were not on already ("checkpointing full, tiled MLP, ...").
TrainingArguments with_memory_savers(const TrainingArguments& args, std::string* added = nullptr);

// The longest max_seq_length for `args` on `target` (which must have a capacity); `progress`
// is told each dry run's count.
MaxContext find_max_context(const TrainingArguments& args, const PlanTarget& target,
                            const std::function<void(int64_t)>& progress = {});

}  // namespace headroom

// The search for the longest context a card fits (Note [The longest context that fits]).
#include "plan/max_context.h"

#include "core/error.h"
#include "nn/model_presets.h"
#include "train/model_source.h"
#include "train/training_config.h"

namespace headroom {

namespace {

constexpr int64_t kFirstTry = 1024;
constexpr int64_t kResolution = 128;  // tokens the bisection stops within
constexpr int64_t kShortest = 16;     // below this nothing is reported as fitting
constexpr int64_t kLongest = int64_t{1} << 24;

}  // namespace

TrainingArguments with_memory_savers(const TrainingArguments& args, std::string* added) {
  TrainingArguments out = args;
  std::string names;
  auto add = [&](bool& flag, const char* name) {
    if (flag) return;
    flag = true;
    names += str_cat(names.empty() ? "" : ", ", name);
  };
  add(out.gradient_checkpointing, "gradient_checkpointing");
  TrainingArguments tiled = out;
  tiled.tiled_mlp = true;
  try {
    resolve_training_config(tiled);
    add(out.tiled_mlp, "tiled_mlp");
  } catch (const NotImplementedError&) {
    // Not with offload_params, ZeRO-3 or FP8 yet (resolve_training_config says why).
  }
  add(out.offload_activations, "offload_activations");
  add(out.expandable_segments, "expandable_segments");
  if (added != nullptr) *added = names;
  return out;
}

MaxContext find_max_context(const TrainingArguments& args, const PlanTarget& target,
                            const std::function<void(int64_t)>& progress) {
  if (target.capacity_bytes <= 0) {
    throw ValueError("max_context: needs a card (--gpu) or a memory size (--gpu-memory)");
  }
  MaxContext result;
  result.args = args;
  // The model's learned positions, when it has them, bound the search.
  const std::optional<int64_t> limit = position_limit(model_config_of(args.model));
  const int64_t longest = limit ? std::min(*limit, kLongest) : kLongest;

  std::optional<TrainingPlan> best;
  auto fits = [&](int64_t tokens) {
    TrainingArguments candidate = args;
    candidate.max_seq_length = tokens;
    ++result.dry_runs;
    if (progress) progress(result.dry_runs);
    try {
      TrainingPlan plan = plan_training(candidate, target);
      if (!plan.fits()) return false;
      if (!best || tokens > best->args.max_seq_length.value_or(0)) best = std::move(plan);
      return true;
    } catch (const OutOfMemoryError&) {
      return false;  // a dry run under the card's capacity that ran out
    }
  };
  // Doubling up to the first length that does not fit, then bisecting.
  int64_t low = 0, high = 0;
  for (int64_t tokens = std::min(kFirstTry, longest);; tokens = std::min(tokens * 2, longest)) {
    if (!fits(tokens)) {
      high = tokens;
      break;
    }
    low = tokens;
    if (tokens == longest) break;
  }
  if (high > 0) {
    if (low == 0) low = kShortest - 1;  // below the first try: bisect down to kShortest
    const int64_t resolution = low < kResolution ? 1 : kResolution;
    while (high - low > resolution) {
      const int64_t middle = low + (high - low) / 2;
      if (fits(middle)) {
        low = middle;
      } else {
        high = middle;
      }
    }
  }
  if (best) {
    result.args = best->args;
    result.args.device = args.device;  // the plan's own is the target's
    result.plan = std::move(best);
  }
  return result;
}

}  // namespace headroom

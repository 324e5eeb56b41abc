// Parsing checkpointing policies and applying them to a model through its block runners.
#include "memsave/checkpoint_policy.h"

#include "core/error.h"
#include "core/text_value.h"

namespace headroom {

bool CheckpointPolicy::checkpoints_block(int64_t layer) const {
  switch (kind) {
    case Kind::none:
      return false;
    case Kind::full:
    case Kind::selective:
      return true;
    case Kind::every_n:
      return layer % every == 0;
  }
  return false;
}

std::string CheckpointPolicy::name() const {
  switch (kind) {
    case Kind::none:
      return "none";
    case Kind::full:
      return "full";
    case Kind::every_n:
      return str_cat("every_", every);
    case Kind::selective:
      return "selective";
  }
  return "none";
}

CheckpointPolicy parse_checkpoint_policy(std::string_view text) {
  using Kind = CheckpointPolicy::Kind;
  if (text == "none") return {Kind::none};
  if (text == "full") return {Kind::full};
  if (text == "selective") return {Kind::selective};
  constexpr std::string_view prefix = "every_";
  if (text.starts_with(prefix)) {
    const std::optional<int64_t> n = whole_number<int64_t>(text.substr(prefix.size()));
    if (n && *n >= 1) return {Kind::every_n, *n};
  }
  throw ValueError(str_cat("gradient_checkpointing_policy: '", text,
                           "' is not one of none, "
                           "full, every_N (N >= 1, e.g. every_2) or selective"));
}

void enable_gradient_checkpointing(CausalLM& model, const CheckpointPolicy& policy,
                                   const CheckpointOptions& options) {
  if (policy.kind == CheckpointPolicy::Kind::every_n && policy.every < 1) {
    throw ValueError(str_cat("gradient checkpointing: every_N needs N >= 1, got ", policy.every));
  }
  BlockRunners runners;
  if (policy.kind != CheckpointPolicy::Kind::none) {
    runners.block = [policy, options](int64_t layer, const LayerForward& forward, const Tensor& x) {
      if (!policy.checkpoints_block(layer)) return forward(x);
      return checkpoint(forward, x, options);
    };
  }
  if (policy.kind == CheckpointPolicy::Kind::selective) {
    runners.matmul = [](const LayerForward& forward, const Tensor& x) {
      return must_save(forward, x);
    };
  }
  model.set_block_runners(std::move(runners));
}

void disable_gradient_checkpointing(CausalLM& model) { model.set_block_runners({}); }

}  // namespace headroom

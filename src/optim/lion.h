// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") with lion_pytorch's
// defaults and update: one momentum buffer, the sign of an interpolation as the step.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

namespace headroom {

// lion_pytorch's defaults. Lion wants an lr 3-10x smaller than AdamW's and a weight decay 3-10x
// larger, since every element moves by lr at each step.
struct LionOptions {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.0;  // decoupled: param *= 1 - lr * weight_decay
};

// What Lion keeps per parameter: exp_avg, f32, the parameter's shape (4 bytes per element),
// allocated at the parameter's first step.
struct LionState {
  Tensor exp_avg;
  int64_t step = 0;  // steps taken with a gradient
};

class Lion final : public Optimizer {
 public:
  // Parameters f32 or bf16 (updated in fp32 and rounded to nearest), on the CPU or the meta
  // device, where step() allocates the state and computes nothing. ValueError for lr < 0, betas
  // outside [0, 1) or weight_decay < 0, naming the option and its value.
  explicit Lion(const std::vector<Tensor>& params, const LionOptions& options = {});
  // What step() allocates for a parameter of `shape` (LionState).
  static std::vector<StateTensor> state_layout(const Shape& shape, const LionOptions& options);
  explicit Lion(const std::vector<NamedTensor>& named_params, const LionOptions& options = {});
  explicit Lion(std::vector<ParamGroup> groups, const LionOptions& options = {});

  // Per element, in fp32 (See Note [Lion update]).
  void step() override;
  // The `optim` name (HF's lion_32bit is accepted for it too).
  std::string name() const override { return "lion"; }
  OptimizerStateDict state_dict() const override;
  void load_state_dict(const OptimizerStateDict& state) override;

  const LionOptions& options() const { return options_; }
  const LionState& state(size_t group, size_t index) const;

 private:
  LionOptions options_;
  std::vector<std::vector<LionState>> states_;  // parallel to groups_[g].params
};

}  // namespace headroom

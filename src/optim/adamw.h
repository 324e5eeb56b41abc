// AdamW (Loshchilov & Hutter) with torch.optim.AdamW's defaults, semantics and order of operations
// (its single-tensor path), on fp32 parameters, with fp32 state allocated at the first step.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

namespace headroom {

// torch.optim.AdamW's defaults. amsgrad, maximize, foreach, capturable and fused are not offered.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

// What AdamW keeps per parameter: 8 bytes per element, from the parameter's device allocator.
struct AdamWState {
  Tensor exp_avg;     // fp32, the parameter's shape; undefined until the parameter's first step
  Tensor exp_avg_sq;  // fp32
  int64_t step = 0;   // steps taken with a gradient
};

class AdamW final : public Optimizer {
 public:
  // Parameters must be fp32 leaves (NotImplementedError names any other dtype) on the CPU or the
  // meta device, where step() allocates the state and computes nothing. ValueError for options
  // outside torch's ranges, naming the option and its value.
  explicit AdamW(const std::vector<Tensor>& params, const AdamWOptions& options = {});
  explicit AdamW(const std::vector<NamedTensor>& named_params, const AdamWOptions& options = {});
  explicit AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});

  // One update of every parameter that has a gradient; the others (grad undefined) are skipped
  // and their step count stays. Records no autograd history.
  void step() override;
  std::string name() const override { return "adamw_torch"; }

  const AdamWOptions& options() const { return options_; }
  // The state of parameter `index` of group `group`.
  const AdamWState& state(size_t group, size_t index) const;

 private:
  void check_lr(double lr) const override;

  AdamWOptions options_;
  std::vector<std::vector<AdamWState>> states_;  // parallel to groups_[g].params
};

}  // namespace headroom

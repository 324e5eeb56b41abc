// AdamW (Loshchilov & Hutter) with torch.optim.AdamW's defaults, semantics and order of operations
// (its single-tensor path), with state allocated at the first step. Beyond torch: bf16 / f16
// parameters updated without an fp32 master copy (stochastic rounding or Kahan compensation), and
// bf16 states.
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
  // headroom's additions. The dtype of exp_avg and exp_avg_sq: f32 (torch) or bf16 (half the
  // state; the update still runs in fp32 and stores them rounded to nearest).
  DType state_dtype = DType::f32;
  // For bf16 / f16 parameters, which have no fp32 copy: how the fp32 result of the update is
  // written back. Kahan keeps one bf16 compensation buffer per parameter (+2 bytes per element)
  // and rounds to nearest; otherwise stochastic rounding (unbiased: small updates survive in
  // expectation) or, with both off, round to nearest (small updates are lost: only for tests).
  bool kahan_summation = false;
  bool stochastic_rounding = true;
  // Seed of the Philox stream stochastic rounding draws from.
  uint64_t rounding_seed = 0x5eed;
};

// What AdamW keeps per parameter, from the parameter's device allocator: 8 bytes per element
// with f32 states, 4 with bf16, plus 2 for a Kahan buffer.
struct AdamWState {
  Tensor exp_avg;       // state_dtype, the parameter's shape; undefined until the first step
  Tensor exp_avg_sq;    // state_dtype
  Tensor compensation;  // bf16; only for low-precision parameters with kahan_summation
  int64_t step = 0;     // steps taken with a gradient
};

// torch.optim.AdamW's range checks of lr, betas, eps and weight_decay: ValueError with torch's
// message, prefixed by `optimizer`. Shared by the Adam family.
void check_adam_hyperparameters(const char* optimizer, double lr, double beta1, double beta2,
                                double eps, double weight_decay);

class AdamW final : public Optimizer {
 public:
  // Parameters must be f32, bf16 or f16 leaves (NotImplementedError names any other dtype) on the
  // CPU or the meta device, where step() allocates the state and computes nothing. Gradients
  // may be f32, bf16 or f16 whatever the parameter's dtype. ValueError for options
  // outside torch's ranges, naming the option and its value.
  explicit AdamW(const std::vector<Tensor>& params, const AdamWOptions& options = {});
  // What step() allocates for a parameter of `shape` and `param_dtype` (AdamWState).
  static std::vector<StateTensor> state_layout(const Shape& shape, DType param_dtype,
                                               const AdamWOptions& options);
  explicit AdamW(const std::vector<NamedTensor>& named_params, const AdamWOptions& options = {});
  explicit AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});

  // One update of every parameter that has a gradient; the others (grad undefined) are skipped
  // and their step count stays. Records no autograd history.
  void step() override;
  // The `optim` name: "adamw_torch", or "adamw_bf16" with bf16 states.
  std::string name() const override {
    return options_.state_dtype == DType::bf16 ? "adamw_bf16" : "adamw_torch";
  }
  // exp_avg, exp_avg_sq (and compensation) per parameter that has stepped, its step count, and
  // the stochastic-rounding generator's position, so that a resumed run rounds as the original.
  OptimizerStateDict state_dict() const override;
  void load_state_dict(const OptimizerStateDict& state) override;

  const AdamWOptions& options() const { return options_; }
  // The state of parameter `index` of group `group`.
  const AdamWState& state(size_t group, size_t index) const;

 private:
  void check_lr(double lr) const override;

  AdamWOptions options_;
  Generator rounding_generator_;
  std::vector<std::vector<AdamWState>> states_;  // parallel to groups_[g].params
};

}  // namespace headroom

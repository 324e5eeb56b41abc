// LOMO (Lv et al. 2023, "Full Parameter Fine-tuning for Large Language Models with Limited
// Resources"; OpenLMLab/LOMO's Lomo): SGD fused into backward. Each gradient is applied and freed
// inside backward, in the parameter's post-accumulate-grad hook, so no full set of gradients
// ever exists and there is no optimizer state.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

namespace headroom {

// Lomo's defaults. Clipping is off unless set; both thresholds must then be > 0.
struct LomoOptions {
  double lr = 1e-3;
  double weight_decay = 0.0;  // param *= 1 - lr * weight_decay before the step
  std::optional<double> clip_grad_norm = std::nullopt;   // global L2 norm: two backward passes
  std::optional<double> clip_grad_value = std::nullopt;  // elementwise, inline
};

// Note [LOMO backward passes]
// Lomo registers a post-accumulate-grad hook (See Note [Post-accumulate-grad hooks]) on every
// parameter that requires grad. A training step is
//   for (int pass = 0; pass < optimizer.backward_passes(); ++pass) {
//     optimizer.begin_backward_pass(pass);
//     backward(loss, Tensor(), /*retain_graph=*/pass + 1 < optimizer.backward_passes());
//   }
//   optimizer.step();
// Without clip_grad_norm there is one pass: each hook clips the gradient by value, applies
// p = p * (1 - lr*wd) - lr * g in fp32 and drops .grad. With clip_grad_norm there are two, as in
// Lomo.grad_norm + fused_backward: pass 0 only adds each gradient's squared norm and drops it;
// pass 1 updates with g * clip_coef, clip_coef = min(1, max_norm / (norm + 1e-6)). The
// parameters do not change during pass 0, so pass 1 sees the same gradients. step() applies the
// update to any parameter that still holds a gradient (one set by hand), and ends the step.
// Gradients must not be accumulated over micro-batches: they are gone after each backward.
// Without clip_grad_norm a plain `backward(loss); step();` loop works as well.
class Lomo final : public Optimizer {
 public:
  // Parameters f32 or bf16 (updated in place in fp32 and rounded to nearest), on any device
  // with lomo and grad_check tables (on meta gradients are dropped, nothing is computed).
  // ValueError for lr < 0, weight_decay < 0 or a clipping threshold <= 0, naming the option and
  // its value.
  explicit Lomo(const std::vector<Tensor>& params, const LomoOptions& options = {});
  explicit Lomo(const std::vector<NamedTensor>& named_params, const LomoOptions& options = {});
  explicit Lomo(std::vector<ParamGroup> groups, const LomoOptions& options = {});
  // Removes the hooks.
  ~Lomo() override;

  void step() override;
  std::string name() const override { return "lomo"; }
  // Only the groups (lr, weight_decay): LOMO keeps no state.
  OptimizerStateDict state_dict() const override;
  void load_state_dict(const OptimizerStateDict& state) override;

  bool updates_in_backward() const override { return true; }
  int backward_passes() const override { return options_.clip_grad_norm ? 2 : 1; }
  // ValueError for a pass outside [0, backward_passes()).
  void begin_backward_pass(int pass) override;

  const LomoOptions& options() const { return options_; }
  // The global gradient norm measured by the last pass 0 (0 before any, and on the meta device;
  // for logging). Between pass 1 and step() it is read from the device.
  double grad_norm() const;

 private:
  enum class Phase { idle, measuring, updating };
  void on_gradient(size_t group, size_t index);
  void apply(size_t group, size_t index);
  // The parameter's position over all groups (its row of norm_partials_).
  size_t flat_index(size_t group, size_t index) const;
  // Pass 0: the gradient's partial norms into its row of norm_partials_.
  void measure(size_t flat, const Tensor& grad);

  LomoOptions options_;
  Phase phase_ = Phase::idle;
  double grad_norm_ = 0.0;
  // See Note [Gradient norms on a native device]: pass 0's partial norms, one row per parameter,
  // and their total norm and clip factor (f32 [2]) on the device; the norm is read back by step()
  // or grad_norm().
  Tensor norm_partials_;
  Tensor norm_result_;
  std::vector<std::pair<Tensor, int>> hooks_;  // parameter, handle
};

}  // namespace headroom

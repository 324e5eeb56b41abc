// SGD with torch.optim.SGD's options, defaults and order of operations (its single-tensor path):
// L2 weight decay added to the gradient, momentum with dampening, Nesterov momentum.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

namespace headroom {

// torch.optim.SGD's options. torch makes lr required; 1e-3 stands in for it here. maximize,
// foreach and differentiable are not offered.
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2: added to the gradient as weight_decay * param
  bool nesterov = false;
};

// What SGD keeps per parameter: with momentum, one f32 buffer of the parameter's shape (4 bytes
// per element), created at the parameter's first step as a copy of its (decayed) gradient as
// torch does; without momentum, nothing.
struct SGDState {
  Tensor momentum_buffer;
  int64_t step = 0;  // steps taken with a gradient
};

class SGD final : public Optimizer {
 public:
  // Parameters f32 or bf16 (updated in fp32 and rounded to nearest), on the CPU or the meta
  // device, where step() allocates the state and computes nothing. ValueError for options outside
  // torch's ranges, with torch's messages.
  explicit SGD(const std::vector<Tensor>& params, const SGDOptions& options = {});
  // What step() allocates for a parameter of `shape` (SGDState: nothing without momentum).
  static std::vector<StateTensor> state_layout(const Shape& shape, const SGDOptions& options);
  explicit SGD(const std::vector<NamedTensor>& named_params, const SGDOptions& options = {});
  explicit SGD(std::vector<ParamGroup> groups, const SGDOptions& options = {});

  void step() override;
  std::string name() const override { return "sgd"; }
  // momentum_buffer per parameter that has one ("state.<g>.<i>.momentum_buffer").
  OptimizerStateDict state_dict() const override;
  void load_state_dict(const OptimizerStateDict& state) override;

  const SGDOptions& options() const { return options_; }
  const SGDState& state(size_t group, size_t index) const;

 private:
  SGDOptions options_;
  std::vector<std::vector<SGDState>> states_;  // parallel to groups_[g].params
};

}  // namespace headroom

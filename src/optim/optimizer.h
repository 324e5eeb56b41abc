// The interface every optimizer shares: parameter groups with a learning rate each (what LR
// schedulers and GradScaler need), step, zero_grad. State dtype and layout belong to each
// optimizer.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "optim/param_groups.h"

namespace headroom {

// One tensor an optimizer keeps for a parameter once it has stepped, as its state_layout()
// describes it: the planner's formulas sum these instead of knowing each optimizer's layout.
struct StateTensor {
  std::string name;  // the state key ("exp_avg", "absmax1")
  Shape shape;
  DType dtype = DType::f32;
  int64_t bytes() const { return shape.numel() * static_cast<int64_t>(dtype_size(dtype)); }
};

// What an optimizer checkpoints, as torch's optimizer.state_dict(): its state tensors by name
// ("state.<group>.<index>.<key>", e.g. "state.0.3.exp_avg") and everything else as JSON:
// {"optimizer": name, "param_groups": [{"lr": .., "weight_decay": .., "params": [names]}],
//  "state": {"<group>.<index>": {"step": ..}}, plus any optimizer-wide entries (RNG state)}.
struct OptimizerStateDict {
  nlohmann::json meta = nlohmann::json::object();
  std::vector<NamedTensor> tensors;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient. Records no autograd history.
  virtual void step() = 0;
  // Drops every gradient (set_to_none, as torch's default) or fills it with zeros.
  virtual void zero_grad(bool set_to_none = true);

  // The optimizer's name as HF's `optim` option spells it, for messages.
  virtual std::string name() const = 0;

  // The state to checkpoint, and its restoration into an optimizer built over the same
  // parameters (ValueError naming the entry on any mismatch of name, shape, dtype or count).
  // After load_state_dict the next steps equal those of the optimizer that was saved.
  virtual OptimizerStateDict state_dict() const;
  virtual void load_state_dict(const OptimizerStateDict& state);

  // Optimizers that apply each update inside backward (LOMO, through post-accumulate-grad hooks)
  // keep no gradients: a training loop runs backward_passes() backward passes per step (2 when
  // clipping by global norm: the first only measures the norm), calling begin_backward_pass(i)
  // before each, then step() to finish, and never accumulates gradients over micro-batches.
  virtual bool updates_in_backward() const { return false; }
  virtual int backward_passes() const { return 1; }
  virtual void begin_backward_pass(int /*pass*/) {}

  // Groups in order; after construction every group's lr and weight_decay are set.
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Learning rate of group `group` (IndexError past the end); set_group_lr checks the value as
  // the optimizer's constructor does.
  double group_lr(size_t group) const;
  void set_group_lr(size_t group, double lr);
  // The first group's lr, and setting every group's.
  double lr() const;
  void set_lr(double lr);

 protected:
  Optimizer() = default;
  // Called by set_group_lr before it stores `lr`: throws ValueError for a value out of range.
  virtual void check_lr(double lr) const;

  // Stores `groups` with each unset lr / weight_decay taken from the defaults, checking each
  // group's pair with check_group(lr, weight_decay), each parameter with check_param(name, param),
  // and that no parameter appears twice (ValueError naming it).
  void set_param_groups(std::vector<ParamGroup> groups, double default_lr,
                        double default_weight_decay,
                        const std::function<void(double, double)>& check_group,
                        const std::function<void(const std::string&, const Tensor&)>& check_param);

  // For state_dict implementations: {"optimizer": name(), "param_groups": [...]}, and its
  // counterpart, which checks the saved optimizer name and groups (count, parameter names) against
  // this optimizer's and restores each group's lr and weight_decay.
  nlohmann::json state_dict_meta() const;
  void load_state_dict_meta(const nlohmann::json& meta);
  // meta[key], or ValueError naming the missing entry.
  const nlohmann::json& state_dict_entry(const nlohmann::json& meta, const std::string& key) const;
  // meta[key] checked as the optimizer's own values are (a saved state is not trusted): a step
  // count, an integer in 0..2^62 (its increments cannot overflow); a generator's seed or offset,
  // an integer in 0..2^64-1; a finite number >= `min`. ValueError naming the key and value.
  int64_t state_dict_step(const nlohmann::json& meta, const std::string& key) const;
  uint64_t state_dict_unsigned(const nlohmann::json& meta, const std::string& key) const;
  double state_dict_number(const nlohmann::json& meta, const std::string& key, double min) const;
  // A copy of the tensor `key` of `state` on `device`, which must have `shape` and `dtype`
  // (ValueError naming the key otherwise, or when it is missing).
  Tensor load_state_tensor(const OptimizerStateDict& state, const std::string& key,
                           const Shape& shape, DType dtype, Device device) const;

  // For state_dict / load_state_dict implementations: fn(group, index, key, param) for every
  // parameter in order, key being "<group>.<index>" as in "state.<key>.<name>"; and, after
  // load_state_dict_meta, fn(group, index, key, param, entry) for every parameter whose state
  // `saved` holds, entry being meta["state"][key].
  using ParamVisitor =
      std::function<void(size_t group, size_t index, const std::string& key, const Tensor& param)>;
  using SavedStateVisitor = std::function<void(size_t group, size_t index, const std::string& key,
                                               const Tensor& param, const nlohmann::json& entry)>;
  void for_each_param(const ParamVisitor& fn) const;
  void for_each_saved_state(const OptimizerStateDict& saved, const SavedStateVisitor& fn) const;

  // For constructors of optimizers over f32 / bf16 parameters: takes `groups`, gives each group
  // without its own lr / weight_decay the defaults, checks them (check_lr; weight_decay >= 0) and
  // every parameter: defined, f32 or bf16 (NotImplementedError naming the dtype otherwise), a
  // contiguous leaf, in one group only (ValueError naming the parameter).
  void set_param_groups(std::vector<ParamGroup> groups, double default_lr,
                        double default_weight_decay);
  // The gradient of parameter `name` contiguous in its own dtype, as the kernel tables take it (a
  // copy only for a strided gradient); NotImplementedError unless it is f32, bf16 or f16.
  Tensor floating_grad(const std::string& name, const Tensor& grad) const;

  std::vector<ParamGroup> groups_;
};

}  // namespace headroom

// The interface every optimizer shares: parameter groups with a learning rate each (what LR
// schedulers and GradScaler need), step, zero_grad. State dtype and layout belong to each optimizer.
#pragma once

#include <string>
#include <vector>

#include "optim/param_groups.h"

namespace headroom {

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

  std::vector<ParamGroup> groups_;
};

}  // namespace headroom

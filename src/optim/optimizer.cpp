// Optimizer: the parts shared by every optimizer (gradients, learning rates per group).
#include "optim/optimizer.h"

#include "core/error.h"

namespace headroom {

void Optimizer::zero_grad(bool set_to_none) {
  for (const ParamGroup& group : groups_) {
    for (const auto& [name, param] : group.params) {
      if (set_to_none) {
        param.set_grad(Tensor());
      } else if (Tensor grad = param.grad(); grad.defined()) {
        grad.zero_();
      }
    }
  }
}

double Optimizer::group_lr(size_t group) const {
  if (group >= groups_.size()) {
    throw IndexError(str_cat(name(), ": no parameter group ", group, " (", groups_.size(),
                             " groups)"));
  }
  return groups_[group].lr.value_or(0.0);
}

void Optimizer::set_group_lr(size_t group, double lr) {
  if (group >= groups_.size()) {
    throw IndexError(str_cat(name(), ": no parameter group ", group, " (", groups_.size(),
                             " groups)"));
  }
  check_lr(lr);
  groups_[group].lr = lr;
}

double Optimizer::lr() const { return groups_.empty() ? 0.0 : group_lr(0); }

void Optimizer::set_lr(double lr) {
  check_lr(lr);
  for (ParamGroup& group : groups_) group.lr = lr;
}

void Optimizer::check_lr(double lr) const {
  if (!(lr >= 0.0)) throw ValueError(str_cat(name(), ": Invalid learning rate: ", lr));
}

}  // namespace headroom

// ZeroRedundancyOptimizer: ZeRO-1's sharded optimizer states (See Note [ZeRO-1 through the
// Optimizer interface]).
#include "dist/zero_optimizer.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/grad_mode.h"
#include "optim/clip_grad.h"

namespace headroom {

std::vector<int> partition_parameters(const std::vector<Tensor>& params, int world_size) {
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].numel() > params[b].numel(); });
  std::vector<int64_t> held(static_cast<size_t>(world_size), 0);
  std::vector<int> owners(params.size(), 0);
  for (size_t i : order) {
    const auto lightest = std::min_element(held.begin(), held.end()) - held.begin();
    owners[i] = static_cast<int>(lightest);
    held[static_cast<size_t>(lightest)] += params[i].numel();
  }
  return owners;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::shared_ptr<Communicator> communicator,
                                                 std::vector<NamedTensor> params,
                                                 const MakeOptimizer& make_local)
    : communicator_(std::move(communicator)), params_(std::move(params)) {
  std::vector<Tensor> tensors;
  for (const auto& [name, p] : params_) tensors.push_back(p);
  owners_ = partition_parameters(tensors, communicator_->world_size());
  if (static_cast<int>(params_.size()) < communicator_->world_size()) {
    throw ValueError(str_cat("zero_stage: ", params_.size(), " trainable parameters for ",
                             communicator_->world_size(),
                             " ranks; every rank needs a share (use zero_stage 0)"));
  }
  std::vector<NamedTensor> share;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (owners_[i] == communicator_->rank()) share.push_back(params_[i]);
  }
  local_ = make_local(share);
  groups_ = local_->param_groups();
  // The clip's rows (Note [Gradient norms over ranks]): this rank's share as its optimizer holds
  // it (an offloaded share's host copies), at their parameters' places in all_params().
  std::map<std::string, int64_t> row_of;
  for (size_t i = 0; i < params_.size(); ++i) row_of[params_[i].first] = static_cast<int64_t>(i);
  std::vector<std::pair<int64_t, Tensor>> own;
  for (const ParamGroup& group : groups_) {
    for (const auto& [name, p] : group.params) own.emplace_back(row_of.at(name), p);
  }
  std::sort(own.begin(), own.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [row, p] : own) {
    clip_rows_.push_back(row);
    clip_share_.push_back(p);
  }
}

void ZeroRedundancyOptimizer::step() {
  // The scheduler sets the learning rates here; the local optimizer reads its own.
  for (size_t g = 0; g < groups_.size(); ++g) local_->set_group_lr(g, group_lr(g));
  local_->step();
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!sharded_.empty() && sharded_[i]) continue;
    const Tensor& p = params_[i].second;
    communicator_->broadcast(p.detach(), owners_[i]);
  }
}

Tensor ZeroRedundancyOptimizer::clip_grad_norm_on_device(double max_norm) {
  Device device = communicator_->device();
  for (const Tensor& p : clip_share_) {
    if (const Tensor grad = p.grad(); grad.defined()) device = grad.device();
  }
  const Tensor table =
      grad_norm_table(clip_share_, clip_rows_, static_cast<int64_t>(params_.size()), device);
  const Tensor carried = table.to(communicator_->device());
  communicator_->all_reduce(carried, ReduceOp::sum);
  return clip_grad_norm_by_table(carried.to(device), clip_share_, max_norm);
}

void ZeroRedundancyOptimizer::set_sharded(std::vector<bool> sharded) {
  if (sharded.size() != params_.size()) {
    throw ValueError(
        str_cat("set_sharded: ", sharded.size(), " flags for ", params_.size(), " parameters"));
  }
  sharded_ = std::move(sharded);
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  local_->zero_grad(set_to_none);  // its own gradients too (an offloaded share's on the host)
  for (const auto& [name, param] : params_) {
    if (set_to_none) {
      param.set_grad(Tensor());
    } else if (Tensor grad = param.grad(); grad.defined()) {
      grad.zero_();
    }
  }
}

void ZeroRedundancyOptimizer::load_state_dict(const OptimizerStateDict& state) {
  local_->load_state_dict(state);
  groups_ = local_->param_groups();
}

}  // namespace headroom

// ZeRO stage 1 (arXiv 1910.02054): optimizer states sharded over the data-parallel ranks. Each
// rank keeps the states of its share of the parameters only, updates those, and broadcasts them;
// gradients are all-reduced in full as in DDP. As torch's ZeroRedundancyOptimizer, the shares are
// whole parameters.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "optim/optimizer.h"

namespace headroom {

// The owner rank of each of `params`: by size, largest first, each to the rank holding the fewest
// elements so far (the lowest such rank on ties): the same on every rank.
std::vector<int> partition_parameters(const std::vector<Tensor>& params, int world_size);

// Note [ZeRO-1 through the Optimizer interface]
// The optimizer's param_groups() are this rank's share, so that GradScaler.unscale_ and the
// LR scheduler act on the share, and state_dict() is this rank's shard. step() updates the share
// and then broadcasts every parameter from its owner, so every rank ends the step with the whole
// updated model; zero_grad() drops every parameter's gradient (each rank holds all of them under
// ZeRO-1, its share's under ZeRO-2, Note [ZeRO-2 gradient reduction]). The
// gradient norm for clipping is the whole model's, as one process computes it
// (clip_grad_norm_on_device), and GradScaler's found_inf is reduced over the ranks by the
// trainer: every rank must call step() or none.
class ZeroRedundancyOptimizer final : public Optimizer {
 public:
  using MakeOptimizer =
      std::function<std::unique_ptr<Optimizer>(const std::vector<NamedTensor>& share)>;
  // `make_local` builds the real optimizer over this rank's share. ValueError when a rank would get
  // no parameter (more ranks than trainable parameters).
  ZeroRedundancyOptimizer(std::shared_ptr<Communicator> communicator,
                          std::vector<NamedTensor> params, const MakeOptimizer& make_local);

  void step() override;
  void zero_grad(bool set_to_none = true) override;
  std::string name() const override { return local_->name(); }
  OptimizerStateDict state_dict() const override { return local_->state_dict(); }
  void load_state_dict(const OptimizerStateDict& state) override;

  // ZeRO-3: the parameters marked (one flag per parameter, in the order given) live on their
  // owner alone (Note [ZeRO-3 parameter sharding]); step() broadcasts only the others.
  void set_sharded(std::vector<bool> sharded);

  // clip_grad_norm_ over every rank's share, bit for bit one process's over all_params() in
  // order (Note [Gradient norms over ranks]): the total norm and clip factor (f32 [2]) on the
  // device of this rank's gradients, which are scaled by it. Every rank calls it.
  Tensor clip_grad_norm_on_device(double max_norm);

  // Every parameter, in the order given, and its owner rank.
  const std::vector<NamedTensor>& all_params() const { return params_; }
  const std::vector<int>& owners() const { return owners_; }

 private:
  std::shared_ptr<Communicator> communicator_;
  std::vector<NamedTensor> params_;
  std::vector<int> owners_;
  std::vector<bool> sharded_;
  std::unique_ptr<Optimizer> local_;
  std::vector<Tensor> clip_share_;  // the local optimizer's tensors in all_params()' order
  std::vector<int64_t> clip_rows_;  // their indices in all_params()
};

}  // namespace headroom

// AdamW with 8-bit states, as bitsandbytes' AdamW8bit (optim_bits=8, block_wise=True) and HF's
// `optim=adamw_8bit` / `adamw_bnb_8bit`: exp_avg and exp_avg_sq as one byte per element, codes of
// the signed and unsigned dynamic maps scaled by an fp32 absmax per block of 256, so the state is
// about 2 bytes per parameter instead of 8. Tensors below min_8bit_size elements keep fp32 states.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

namespace headroom {

// bitsandbytes' AdamW8bit defaults (those of torch.optim.AdamW, plus min_8bit_size).
struct AdamW8bitOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  // Parameters with fewer elements keep fp32 exp_avg / exp_avg_sq (bitsandbytes' min_8bit_size).
  int64_t min_8bit_size = 4096;
};

// Per parameter, from the parameter's device allocator. 8-bit: state1 and state2 u8 in the
// parameter's shape, absmax1 and absmax2 f32 [ceil(numel / 256)], i.e. 2 bytes per element plus
// 8 bytes per block. 32-bit (fewer than min_8bit_size elements): state1 and state2 f32, no absmax.
// The names are bitsandbytes' state keys.
struct AdamW8bitState {
  Tensor state1;   // exp_avg; undefined until the first step
  Tensor state2;   // exp_avg_sq
  Tensor absmax1;  // f32, per block of state1; 8-bit only
  Tensor absmax2;
  int64_t step = 0;  // steps taken with a gradient
};

class AdamW8bit final : public Optimizer {
 public:
  // Parameters must be contiguous f32, bf16 or f16 leaves (NotImplementedError names any other
  // dtype), on the CPU, a GPU or the meta device, where step() allocates the state and computes
  // nothing. A 16-bit parameter is updated in fp32 and rounded where bitsandbytes rounds it (twice
  // per step: Note [bitsandbytes 16-bit parameters]); its states are those of an f32 one.
  // Gradients may be f32, bf16 or f16. ValueError for options out of range, naming the option and
  // its value.
  explicit AdamW8bit(const std::vector<Tensor>& params, const AdamW8bitOptions& options = {});
  // What step() allocates for a parameter of `shape` (AdamW8bitState).
  static std::vector<StateTensor> state_layout(const Shape& shape, const AdamW8bitOptions& options);
  explicit AdamW8bit(const std::vector<NamedTensor>& named_params,
                     const AdamW8bitOptions& options = {});
  explicit AdamW8bit(std::vector<ParamGroup> groups, const AdamW8bitOptions& options = {});

  // One update of every parameter with a gradient, in bitsandbytes' order of operations (see
  // Note [bitsandbytes AdamW order of operations]). Records no autograd history.
  void step() override;
  std::string name() const override { return "adamw_8bit"; }
  // state1, state2 (and absmax1, absmax2) per parameter that has stepped, and its step count.
  OptimizerStateDict state_dict() const override;
  void load_state_dict(const OptimizerStateDict& state) override;

  const AdamW8bitOptions& options() const { return options_; }
  // The state of parameter `index` of group `group`.
  const AdamW8bitState& state(size_t group, size_t index) const;
  // Whether a parameter of `numel` elements gets 8-bit states.
  bool uses_8bit_state(int64_t numel) const { return numel >= options_.min_8bit_size; }

 private:
  void check_lr(double lr) const override;

  AdamW8bitOptions options_;
  std::vector<std::vector<AdamW8bitState>> states_;  // parallel to groups_[g].params
};

}  // namespace headroom

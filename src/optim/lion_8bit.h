// Lion with an 8-bit momentum, as bitsandbytes' Lion8bit (Lion with optim_bits=8, block_wise) and
// HF's `optim=lion_8bit`: exp_avg as one byte per element, codes of the signed dynamic map scaled
// by an fp32 absmax per block of 256, so the state is about 1 byte per parameter instead of 4.
// Tensors below min_8bit_size elements keep an fp32 state.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"
#include "optim/param_groups.h"

namespace headroom {

// bitsandbytes' Lion8bit defaults.
struct Lion8bitOptions {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.0;  // decoupled: param *= 1 - lr * weight_decay
  // Parameters with fewer elements keep an fp32 exp_avg (bitsandbytes' min_8bit_size).
  int64_t min_8bit_size = 4096;
};

// Per parameter, from the parameter's device allocator. 8-bit: state1 u8 in the parameter's shape
// and absmax1 f32 [ceil(numel / 256)], 1 byte per element plus 4 per block; 32-bit: state1 f32.
// The names are bitsandbytes' state keys.
struct Lion8bitState {
  Tensor state1;     // exp_avg; undefined until the first step
  Tensor absmax1;    // 8-bit only
  int64_t step = 0;  // steps taken with a gradient
};

class Lion8bit final : public Optimizer {
 public:
  // Parameters: contiguous f32, bf16 or f16 leaves on the CPU, a GPU or the meta device (where
  // step() allocates the state and computes nothing); a 16-bit parameter is rounded where
  // bitsandbytes rounds it (Note [bitsandbytes 16-bit parameters]). ValueError for lr < 0, betas
  // outside [0, 1), weight_decay < 0 or min_8bit_size < 0, naming the option and its value.
  explicit Lion8bit(const std::vector<Tensor>& params, const Lion8bitOptions& options = {});
  // What step() allocates for a parameter of `shape` (Lion8bitState).
  static std::vector<StateTensor> state_layout(const Shape& shape, const Lion8bitOptions& options);
  explicit Lion8bit(const std::vector<NamedTensor>& named_params,
                    const Lion8bitOptions& options = {});
  explicit Lion8bit(std::vector<ParamGroup> groups, const Lion8bitOptions& options = {});

  // One update of every parameter with a gradient (Note [bitsandbytes Lion]).
  void step() override;
  std::string name() const override { return "lion_8bit"; }
  // state1 (and absmax1) per parameter that has stepped, and its step count.
  OptimizerStateDict state_dict() const override;
  void load_state_dict(const OptimizerStateDict& state) override;

  const Lion8bitOptions& options() const { return options_; }
  const Lion8bitState& state(size_t group, size_t index) const;
  bool uses_8bit_state(int64_t numel) const { return numel >= options_.min_8bit_size; }

 private:
  Lion8bitOptions options_;
  std::vector<std::vector<Lion8bitState>> states_;  // parallel to groups_[g].params
};

}  // namespace headroom

// The building blocks of GPT-2 and Llama as modules with HF's parameter names: Linear (either
// weight layout, or a frozen 4-bit weight as bitsandbytes' Linear4bit), Embedding, LayerNorm,
// RMSNorm.
#pragma once

#include <memory>

#include "nn/module.h"
#include "ops/linear.h"
#include "quant/quant_4bit.h"

namespace headroom {

// A linear layer. Its weight is a trainable parameter, or (QLoRA) a frozen 4-bit tensor in
// bitsandbytes' layout, [out, in] for either layout as transformers stores Conv1D weights, that
// forward multiplies through linear_4bit; the bias stays a parameter. See nn/linear_4bit.h.
class Linear : public Module {
 public:
  // Weight [out, in] (out_in, nn.Linear) or [in, out] (in_out, GPT-2's Conv1D); uninitialised.
  Linear(int64_t in, int64_t out, bool bias, WeightLayout layout, Device device);
  Tensor forward(const Tensor& x) const;
  // Undefined for a 4-bit layer.
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  WeightLayout layout() const { return layout_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  // Makes the weight a frozen 4-bit one computing in `compute_dtype`: `weight` has shape
  // [out, in]. The full-precision parameter is dropped (no longer a parameter, its memory freed
  // with the last reference). ValueError for another shape.
  void set_weight_4bit(Quant4bitWeight weight, DType compute_dtype);
  // The 4-bit weight, or null for a full-precision layer.
  const Quant4bitWeight* weight_4bit() const { return quant_.get(); }
  DType compute_dtype() const { return compute_dtype_; }

 protected:
  // bitsandbytes' state_dict entries of a 4-bit weight (weight, weight.absmax, ...).
  std::vector<std::pair<std::string, Tensor>> own_buffers() const override;

 private:
  Tensor weight_, bias_;
  WeightLayout layout_;
  int64_t in_, out_;
  std::shared_ptr<const Quant4bitWeight> quant_;
  DType compute_dtype_ = DType::f32;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Device device);
  Tensor forward(const Tensor& ids) const;
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
};

class LayerNorm : public Module {
 public:
  LayerNorm(int64_t dim, double eps, Device device);  // weight 1, bias 0
  Tensor forward(const Tensor& x) const;

 private:
  Tensor weight_, bias_;
  double eps_;
};

class RMSNorm : public Module {
 public:
  RMSNorm(int64_t dim, double eps, Device device);  // weight 1
  Tensor forward(const Tensor& x) const;

 private:
  Tensor weight_;
  double eps_;
};

}  // namespace headroom

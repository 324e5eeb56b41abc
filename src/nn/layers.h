// The building blocks of GPT-2 and Llama as modules with HF's parameter names: Linear (either
// weight layout, optionally with an adapter), Embedding, LayerNorm, RMSNorm.
#pragma once

#include <memory>

#include "nn/module.h"
#include "ops/linear.h"

namespace headroom {

// The seam through which peft/ adds a trainable branch to a projection (LoRA's
// B(A(dropout(x)))·scaling): the layer computes its own output, then hands x and that output to
// the adapter, which returns the sum. Any base layer can hold one: the full-precision Linear
// below, or a 4-bit frozen linear (quant/), which calls adapter->forward the same way.
class LinearAdapter : public Module {
 public:
  // x [..., in], base [..., out] (the base layer's output) -> the layer's output.
  virtual Tensor forward(const Tensor& x, const Tensor& base) const = 0;
};

class Linear : public Module {
 public:
  // Weight [out, in] (out_in, nn.Linear) or [in, out] (in_out, GPT-2's Conv1D); uninitialised.
  Linear(int64_t in, int64_t out, bool bias, WeightLayout layout, Device device);
  Tensor forward(const Tensor& x) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  WeightLayout layout() const { return layout_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  // Attaches `adapter` (its parameters named beside weight, e.g. "lora_A.weight"); one at most.
  void set_adapter(std::unique_ptr<LinearAdapter> adapter);
  LinearAdapter* adapter() const { return adapter_; }
  // Detaches the adapter (after merging it into the weight); its parameters leave the tree.
  void remove_adapter();

 private:
  Tensor weight_, bias_;
  WeightLayout layout_;
  int64_t in_, out_;
  LinearAdapter* adapter_ = nullptr;  // owned as a child module
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

// The building blocks of GPT-2 and Llama as modules with HF's parameter names: Linear (either
// weight layout), Embedding, LayerNorm, RMSNorm.
#pragma once

#include "nn/module.h"
#include "ops/linear.h"

namespace headroom {

class Linear : public Module {
 public:
  // Weight [out, in] (out_in, nn.Linear) or [in, out] (in_out, GPT-2's Conv1D); uninitialised.
  Linear(int64_t in, int64_t out, bool bias, WeightLayout layout, Device device);
  Tensor forward(const Tensor& x) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  Tensor weight_, bias_;
  WeightLayout layout_;
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

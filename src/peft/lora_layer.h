// LoraLayer: the adapter PEFT's lora.Linear adds to a projection, y = base(x) + B(A(dropout(x)))·s,
// with A [r, in] and B [out, r] (both nn.Linear layout, also on GPT-2's Conv1D bases).
#pragma once

#include "core/generator.h"
#include "nn/layers.h"
#include "peft/lora_config.h"

namespace headroom {

class LoraLayer : public LinearAdapter {
 public:
  // An adapter for a base of `in` -> `out` features, initialised as config.init_lora_weights
  // says, drawn from `generator`, in `dtype`.
  LoraLayer(int64_t in, int64_t out, const LoraConfig& config, Device device, DType dtype,
            Generator* generator);
  // Dropout only on the adapter's branch, and only in training, as PEFT.
  // The branch joins base in one GEMM (ops/linear.h: linear_add) where lora_B is a plain
  // projection.
  Tensor forward(const Tensor& x, Tensor base) const override;
  // Without an active dropout, x only enters lora_A, a projection converting it as the base does.
  bool reads_input_as_projection() const override;

  const Tensor& lora_A() const { return lora_A_.weight(); }
  const Tensor& lora_B() const { return lora_B_.weight(); }
  double scaling() const { return scaling_; }

 private:
  Linear& lora_A_;
  Linear& lora_B_;
  double scaling_;
  double dropout_;
};

}  // namespace headroom

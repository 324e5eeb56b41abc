// Dropout from the Philox stream: the mask is a function of (seed, offset, element index), so
// backward regenerates it instead of saving it, and a recompute (activation checkpointing) with
// the same generator state reproduces it exactly.
#pragma once

#include "core/generator.h"
#include "core/tensor.h"

namespace headroom {

// Zeroes each element with probability p and scales the rest by 1/(1-p); the identity (no copy)
// when !training or p == 0. Draws from `generator` (the default one if null).
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* generator = nullptr);

// add(residual, dropout(x, p, training, generator)) in one kernel, bit for bit: the same draw
// from the generator, the dropped x rounded to x's dtype, the sum in add's result dtype. A
// transformer's residual stream after an attention or MLP projection (GPT-2's resid_pdrop).
// Shapes that differ (broadcasting) take the two ops.
Tensor dropout_add(const Tensor& residual, const Tensor& x, double p, bool training = true,
                   Generator* generator = nullptr);

}  // namespace headroom

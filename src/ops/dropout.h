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

}  // namespace headroom

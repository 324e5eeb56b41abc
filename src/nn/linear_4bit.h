// QLoRA's frozen 4-bit base on the model side: which linear layers are 4-bit, the weight a merge
// needs, and the conversion of a model's linear layers, one layer at a time (as transformers'
// replace_with_bnb_linear, which leaves lm_head in full precision).
#pragma once

#include <string>
#include <vector>

#include "nn/layers.h"
#include "quant/linear_4bit.h"

namespace headroom {

// True when the layer's weight is a frozen 4-bit one (Linear::weight_4bit() then says which);
// Linear::forward then runs linear_4bit(x, *weight_4bit(), bias(), compute_dtype()).
inline bool is_linear_4bit(const Linear& layer) { return layer.weight_4bit() != nullptr; }

// The frozen 4-bit weights of the layers below `root`, in module order: the model's weights
// that are buffers, not parameters (for parameter counts, byte counts and memory tags).
std::vector<const Quant4bitWeight*> weights_4bit(Module& root);

// The layer's weight in its own layout ([out, in], or [in, out] for Conv1D) and `dtype`:
// the parameter converted, or the 4-bit weight dequantized whole (for merging an adapter).
Tensor linear_weight_as(const Linear& layer, DType dtype);

// The weight of a full-precision layer quantized as `config` says: an [in, out] (Conv1D)
// weight is transposed first, as transformers does.
Quant4bitWeight quantize_linear_weight(const Linear& layer, const Quant4bitConfig& config);

// Converts every full-precision Linear below `root` whose dotted name is not in `skip_modules`
// (names or final components, transformers' llm_int8_skip_modules; lm_head by default) to a
// frozen 4-bit layer computing in config.compute_dtype, one layer at a time, so at most one
// layer's extra copy exists at once. Returns the names converted.
std::vector<std::string> convert_linears_to_4bit(Module& root, const Quant4bitConfig& config,
                                                 const std::vector<std::string>& skip_modules = {
                                                     "lm_head"});

// The converse, for a merge: every 4-bit Linear below `root` made full precision, its weight
// dequantized whole to `dtype` (Linear::set_weight), one layer at a time; frozen as before.
// Returns how many.
int64_t dequantize_linears(Module& root, DType dtype);

// True when `name` ("model.layers.0.mlp.up_proj") is listed in `skip_modules`, whole or as its
// last component(s).
bool is_skipped_module(const std::string& name, const std::vector<std::string>& skip_modules);

}  // namespace headroom

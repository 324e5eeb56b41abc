// Autocast's op policy and cast cache: which op runs in which precision while an autocast region
// (amp/autocast.h) is active, in one table, as aten/src/ATen/autocast_mode.cpp lists them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace headroom {

// Note [Autocast policy]
// lower_precision  floating inputs are cast to the region's dtype (bf16 / f16) and the op runs
//                  there: linear, matmul, scaled_dot_product_attention, and the LM head's GEMM
//                  inside linear_cross_entropy (whose loss is still computed in fp32).
// fp32             floating inputs are cast to f32 and the output is f32: softmax, layer_norm,
//                  rms_norm, cross_entropy, sum, mean.
// promote          the output has the widest floating input dtype. add, sub, mul and swiglu
//                  promote by themselves (their kernels read every dtype and compute in fp32), so
//                  autocast casts nothing for them and no fp32 copy of a bf16 input is saved.
// Ops not listed (views, embedding, gelu, silu, dropout, rotary) run in their input's dtype, as
// in PyTorch, where they are not on any autocast list either.
//
// The table has a row only for ops that exist, under the name each passes to autocast_inputs;
// an op added under one of PyTorch's listed names adds its row. Of PyTorch's lists: torch's bmm
// is matmul here (3-D and broadcast batched operands go through matmul, the same row); the
// reductions are sum and mean; there are no log_softmax, exp, log or pow ops, because the
// models do not need them: cross_entropy and linear_cross_entropy take the log-softmax inside,
// in fp32; attention's softmax is its online softmax, in fp32 on fp32 copies of q, k, v; and
// rms_norm is one fused op (below).
//
// The table is PyTorch's CUDA lists (AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32 and
// AT_FORALL_FP32_SET_OPT_DTYPE, which softmax and sum are on), and every device type uses it, so
// a CUDA run, its dry run on the meta device and the CPU reference cast the same ops; only the
// default dtype differs by device (amp/autocast.h: f16 on CUDA, bf16 elsewhere). PyTorch's CPU
// lists are shorter (softmax, layer_norm and sum are not fp32 there); headroom's CPU follows the
// CUDA lists instead, so that the CPU is the GPU's reference.
//
// Differences from PyTorch: mean is on no PyTorch list (a bf16 mean returns bf16 there) but is
// fp32 here, as sum is; rms_norm is one fused op here (HF computes it as pow / mean / rsqrt,
// which are all fp32-listed), so its statistics and output are fp32 as PyTorch's would be; and
// linear_cross_entropy keeps the logits of each chunk in fp32 instead of rounding them to the
// region's dtype first (the unfused PyTorch path holds bf16 logits), which only removes a
// rounding.
enum class AutocastPolicy : uint8_t { lower_precision, fp32, promote };

// The policy of `op`, or nullopt when autocast leaves the op alone.
std::optional<AutocastPolicy> autocast_policy(std::string_view op);

// The inputs as autocast wants them for `op`, or nullopt when nothing changes (autocast off for
// the inputs' device type, op not lower_precision / fp32, or every input already in the target
// dtype). Undefined and non-floating inputs pass through. Casts are autograd-aware (ops/cast.h);
// casts of fp32 leaves that require grad to the region's dtype go through the cast cache.
std::optional<std::vector<Tensor>> autocast_inputs(std::string_view op,
                                                   const std::vector<Tensor>& inputs);

// The dtype autocast converts `op`'s floating inputs on `device` to (the region's for
// lower_precision, f32 for fp32), or nullopt when it converts none there.
std::optional<DType> autocast_input_dtype(std::string_view op, Device device);

// The cast cache of this thread: an fp32 parameter is cast once per autocast region, however
// often it is used; the region's exit (outermost) clears it. Only casts made inside a region
// that has cache_enabled are cached, as in torch.autocast(cache_enabled=True).
struct AutocastCacheStats {
  int64_t hits = 0;     // casts answered from the cache, since the thread started
  int64_t misses = 0;   // casts made and stored
  int64_t entries = 0;  // cached casts now
  size_t bytes = 0;     // bytes the cached casts hold now
};
AutocastCacheStats autocast_cache_stats();

// Casts those of `tensors` that the cache takes and does not hold yet (fp32 leaves that require
// grad, contiguous, on the first one's device) to the region's dtype now, in one list launch
// (ops/cast.h: cast_all), and caches them: the casts a forward would otherwise make one launch at
// a time as it reaches each weight (the Trainer passes the weights its previous forward cast).
// Does nothing outside a region with the cache on.
void prefetch_autocast_casts(const std::vector<Tensor>& tensors);
// The tensors the cache holds casts of, in the order the casts were made.
std::vector<Tensor> autocast_cached_sources();
void clear_autocast_cache();

}  // namespace headroom

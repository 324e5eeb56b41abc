// The sequences packed in the rows of a batch, as the model reads them: the attention kernels'
// boundaries (cu_seqlens) and each token's position within its sequence (position_ids).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/attention_kernels.h"
#include "core/device.h"
#include "core/tensor.h"

namespace headroom {

// Made once per batch on the model's device; GPT-2 and Llama take it with their input_ids so
// that no token attends across a boundary and positions restart at 0 for every sequence (TRL's
// padding-free batches: Note [Packed sequences in attention]). Default-constructed: one sequence
// a row (positions 0 .. T - 1), which adds no tensor and no kernel to a step.
struct SequenceBoundaries {
  AttentionSequences attention;  // cu_seqlens int32 [N + 1] on the device, and its host values
  Tensor position_ids;           // i64 [B, T] on the device
  int64_t max_length = 0;        // the longest sequence's tokens (0 when unpacked)
  bool packed() const { return attention.packed(); }
};

// The boundaries of a [batch, len] batch from flash-attention's cu_seqlens over the flattened
// [batch * len] positions (0 first, batch * len last, strictly increasing, every row start
// among them), their two tensors allocated on `device` (and filled there; the meta device's are
// empty). Empty cu_seqlens: the unpacked default. ValueError naming the entry otherwise.
SequenceBoundaries make_sequence_boundaries(const std::vector<int32_t>& cu_seqlens, int64_t batch,
                                            int64_t len, Device device);

// ValueError naming `model` unless `sequences` is unpacked or made for input_ids' [B, T].
void check_sequence_boundaries(const char* model, const Tensor& input_ids,
                               const SequenceBoundaries& sequences);

}  // namespace headroom

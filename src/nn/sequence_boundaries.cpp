// make_sequence_boundaries: host cu_seqlens to the tensors the model's attention and position
// embeddings read.
#include "nn/sequence_boundaries.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "backend/attention_buffers.h"
#include "core/error.h"

namespace headroom {

namespace {

// A tensor of `shape` and `dtype` on `device` holding `bytes` of host values: allocated on the
// device first so that every device allocates the same blocks (the meta device's stay empty),
// and filled from a host copy where the device is not the CPU.
Tensor device_tensor(const void* values, size_t bytes, const Shape& shape, DType dtype,
                     Device device) {
  Tensor t = Tensor::empty(shape, dtype, device);
  if (bytes == 0 || device.is_meta()) return t;
  if (device.is_cpu()) {
    std::memcpy(t.data_ptr(), values, bytes);
    return t;
  }
  const Tensor host = Tensor::empty(shape, dtype, kCPU);
  std::memcpy(host.data_ptr(), values, bytes);
  t.copy_(host);
  return t;
}

// Each position's offset in its sequence (TRL's position_ids), on the host.
std::vector<int64_t> positions_in_sequences(const std::vector<int32_t>& cu_seqlens, int64_t batch,
                                            int64_t len) {
  std::vector<int64_t> positions(static_cast<size_t>(batch * len));
  for (size_t n = 0; n + 1 < cu_seqlens.size(); ++n) {
    for (int64_t p = cu_seqlens[n]; p < cu_seqlens[n + 1]; ++p) {
      positions[static_cast<size_t>(p)] = p - cu_seqlens[n];
    }
  }
  return positions;
}

}  // namespace

void check_sequence_boundaries(const char* model, const Tensor& input_ids,
                               const SequenceBoundaries& sequences) {
  if (!sequences.packed()) return;
  if (sequences.position_ids.shape() != input_ids.shape() ||
      sequences.position_ids.device() != input_ids.device()) {
    throw ValueError(str_cat(model, ": the sequence boundaries were made for ",
                             sequences.position_ids.shape(), " on ",
                             sequences.position_ids.device(), ", not input_ids ", input_ids.shape(),
                             " on ", input_ids.device()));
  }
}

SequenceBoundaries make_sequence_boundaries(const std::vector<int32_t>& cu_seqlens, int64_t batch,
                                            int64_t len, Device device) {
  SequenceBoundaries out;
  if (cu_seqlens.empty()) return out;
  check_cu_seqlens("make_sequence_boundaries", cu_seqlens, batch, len);
  const auto count = static_cast<int64_t>(cu_seqlens.size());
  for (size_t n = 0; n + 1 < cu_seqlens.size(); ++n) {
    out.max_length = std::max<int64_t>(out.max_length, cu_seqlens[n + 1] - cu_seqlens[n]);
  }
  out.attention.host = std::make_shared<const std::vector<int32_t>>(cu_seqlens);
  out.attention.cu_seqlens = device_tensor(cu_seqlens.data(), cu_seqlens.size() * sizeof(int32_t),
                                           Shape{count}, DType::i32, device);
  const std::vector<int64_t> positions = positions_in_sequences(cu_seqlens, batch, len);
  out.position_ids = device_tensor(positions.data(), positions.size() * sizeof(int64_t),
                                   Shape{batch, len}, DType::i64, device);
  return out;
}

}  // namespace headroom

// Rows of a contiguous tensor seen as fp32 by the CPU kernels: f32 rows in place, bf16 / f16
// rows widened one row at a time into a buffer of the calling thread, and results rounded once
// into the tensor's dtype, as the CUDA kernels widen on load and round on store. The fp32
// copies of whole tensors that the ops once made are gone; a bf16 run touches only its rows.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype_convert.h"
#include "core/tensor.h"

namespace headroom::cpu {

class WidenRows {
 public:
  WidenRows() = default;
  // t contiguous (or undefined: every access then yields null), `dim` elements a row.
  WidenRows(const Tensor& t, int64_t dim)
      : base_(t.defined() ? static_cast<char*>(t.data_ptr()) : nullptr),
        dtype_(t.defined() ? t.dtype() : DType::f32),
        row_bytes_(dim * (t.defined() ? static_cast<int64_t>(t.element_size()) : 4)),
        dim_(dim) {}

  bool defined() const { return base_ != nullptr; }
  bool in_place() const { return dtype_ == DType::f32; }

  // Row r as fp32: the row itself, or its values widened (exactly) into buf[0, dim).
  const float* read(int64_t r, float* buf) const {
    if (!base_) return nullptr;
    if (in_place()) return reinterpret_cast<const float*>(base_ + r * row_bytes_);
    convert_to_f32(base_ + r * row_bytes_, dtype_, buf, static_cast<size_t>(dim_));
    return buf;
  }
  // Where to compute row r in fp32: the row itself, or buf, which store() then rounds into it.
  float* target(int64_t r, float* buf) const {
    if (!base_) return nullptr;
    return in_place() ? reinterpret_cast<float*>(base_ + r * row_bytes_) : buf;
  }
  void store(int64_t r, const float* computed) const {
    if (base_ && !in_place()) {
      convert_from_f32(computed, base_ + r * row_bytes_, dtype_, static_cast<size_t>(dim_));
    }
  }

 private:
  char* base_ = nullptr;
  DType dtype_ = DType::f32;
  int64_t row_bytes_ = 0;
  int64_t dim_ = 0;
};

// Elements [offset, offset + n) of a contiguous tensor as fp32: in place when it is f32, else
// widened into buf.
inline const float* widen_span(const Tensor& t, int64_t offset, int64_t n, float* buf) {
  if (t.dtype() == DType::f32) return t.data<float>() + offset;
  const char* base = static_cast<const char*>(t.data_ptr());
  convert_to_f32(base + offset * static_cast<int64_t>(t.element_size()), t.dtype(), buf,
                 static_cast<size_t>(n));
  return buf;
}

// Where to compute elements [offset, offset + n) of t in fp32 (null for an undefined t), and
// their rounding into t once computed (store_span).
inline float* span_target(const Tensor& t, int64_t offset, float* buf) {
  if (!t.defined()) return nullptr;
  return t.dtype() == DType::f32 ? t.data<float>() + offset : buf;
}
inline void store_span(const Tensor& t, int64_t offset, int64_t n, const float* computed) {
  if (!t.defined() || t.dtype() == DType::f32) return;
  char* base = static_cast<char*>(t.data_ptr());
  convert_from_f32(computed, base + offset * static_cast<int64_t>(t.element_size()), t.dtype(),
                   static_cast<size_t>(n));
}

// A vector of the tensor's values as fp32 (weights, biases: read by every row): the tensor's own
// data when it is f32, else widened once into `storage`. Null for an undefined tensor.
inline const float* widened(const Tensor& t, std::vector<float>& storage) {
  if (!t.defined()) return nullptr;
  if (t.dtype() == DType::f32) return t.data<float>();
  storage.resize(static_cast<size_t>(t.numel()));
  convert_to_f32(t.data_ptr(), t.dtype(), storage.data(), storage.size());
  return storage.data();
}

// The calling thread's scratch of at least n floats, kept between calls.
inline float* thread_scratch(int64_t n) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(n)) scratch.resize(static_cast<size_t>(n));
  return scratch.data();
}

}  // namespace headroom::cpu

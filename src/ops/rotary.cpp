// rotary_embedding: HF Llama's rotary position embedding. Backward rotates the gradient back by
// the same angles, so nothing is saved: the cos / sin table is recomputed from the parameters.
#include "ops/rotary.h"

#include "autograd/function_node.h"
#include "backend/cpu/rotary.h"
#include "backend/rotary_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

constexpr const char* kOp = "rotary_embedding";

// The rotation of x [B, H, T, D] into a new contiguous tensor; `inverse` rotates back. A native
// device reads x with any strides, computes the table in its kernel and writes `dtype`; the CPU
// reads x with any strides when fp32 and writes fp32 (the caller rounds).
Tensor rotate(const Tensor& x, double theta, int64_t position_offset, bool inverse, DType dtype) {
  const Device device = x.device();
  const OpRoute route = op_route(kOp, device);
  if (route.native) {
    Tensor out = Tensor::empty(x.shape(), dtype, device);
    if (route.kernels) route.need(&RotaryKernels::apply)(x, theta, position_offset, inverse, out);
    return out;
  }
  const int64_t seq_len = x.size(2), dim = x.size(3);
  Tensor out = Tensor::empty(x.shape(), DType::f32, device);
  const Tensor table = Tensor::empty(Shape{2, seq_len, dim / 2}, DType::f32, device);
  const Tensor xf = x.dtype() == DType::f32 ? x : f32_contiguous(x);
  if (route.cpu) {
    cpu::rotary_table(seq_len, dim, theta, position_offset, table.data<float>());
    const int64_t strides[4] = {xf.stride(0), xf.stride(1), xf.stride(2), xf.stride(3)};
    const int64_t sizes[4] = {xf.size(0), xf.size(1), seq_len, dim};
    cpu::rotary_apply(xf.data<float>(), strides, sizes, table.data<float>(), inverse,
                      out.data<float>());
  }
  return out;
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, double theta, int64_t position_offset) {
  RecordFunction record("rotary_embedding", x);
  check_floating(kOp, "x", x);
  if (x.ndim() != 4) {
    throw ValueError(str_cat(kOp, ": x ", x.shape(), " must be 4-D [B, H, T, D]"));
  }
  if (x.size(3) % 2 != 0) {
    throw ValueError(str_cat(kOp, ": head size ", x.size(3), " of x ", x.shape(), " must be even"));
  }
  if (!(theta > 0.0)) throw ValueError(str_cat(kOp, ": theta ", theta, " must be positive"));
  if (position_offset < 0) {
    throw ValueError(str_cat(kOp, ": position_offset ", position_offset, " must be >= 0"));
  }
  const DType dtype = x.dtype();
  const Tensor out = to_dtype(rotate(x, theta, position_offset, false, dtype), dtype);
  if (auto node = make_function_node("RotaryEmbeddingBackward0", {x})) {
    node->set_backward([theta, position_offset, dtype](BackwardContext& ctx) -> std::vector<Tensor> {
      return {rotate(ctx.grad_output(), theta, position_offset, true, dtype)};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom

// rotary_embedding: HF Llama's rotary position embedding. Backward rotates the gradient back by
// the same angles, so nothing is saved: the cos / sin table is recomputed from the parameters.
#include "ops/rotary.h"

#include "autograd/function_node.h"
#include "backend/rotary_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

constexpr const char* kOp = "rotary_embedding";

// The rotation of x [B, H, T, D] (any strides) into a new contiguous tensor in `dtype`;
// `inverse` rotates back. Every device computes the cos / sin table inside its kernel.
Tensor rotate(const Tensor& x, const RopeParameters& rope, int64_t position_offset, bool inverse,
              DType dtype, const Tensor& positions) {
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  need_kernel(kOp, x.device(), &RotaryKernels::apply)(x, rope, position_offset, inverse, out,
                                                      positions);
  return out;
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, double theta, int64_t position_offset) {
  return rotary_embedding(x, RopeParameters{.theta = theta, .scaling = RopeScaling{}},
                          position_offset);
}

Tensor rotary_embedding(const Tensor& x, const RopeParameters& rope, int64_t position_offset,
                        const Tensor& positions) {
  const double theta = rope.theta;
  RecordFunction record("rotary_embedding", x);
  check_floating(kOp, "x", x);
  if (x.ndim() != 4) {
    throw ValueError(str_cat(kOp, ": x ", x.shape(), " must be 4-D [B, H, T, D]"));
  }
  if (x.size(3) % 2 != 0) {
    throw ValueError(str_cat(kOp, ": head size ", x.size(3), " of x ", x.shape(), " must be even"));
  }
  if (!(theta > 0.0)) throw ValueError(str_cat(kOp, ": theta ", theta, " must be positive"));
  if (!(rope.scaling.factor > 0.0)) {
    throw ValueError(
        str_cat(kOp, ": rope scaling factor ", rope.scaling.factor, " must be positive"));
  }
  if (rope.scaling.type == RopeScaling::Type::longrope &&
      2 * static_cast<int64_t>(rope.scaling.factor_count) != x.size(3)) {
    throw ValueError(str_cat(kOp, ": longrope has ", rope.scaling.factor_count,
                             " factors per set; head size ", x.size(3), " of x ", x.shape(),
                             " needs one per frequency (", x.size(3) / 2, ")"));
  }
  if (position_offset < 0) {
    throw ValueError(str_cat(kOp, ": position_offset ", position_offset, " must be >= 0"));
  }
  if (positions.defined()) {
    check_same_device(kOp, {x, positions});
    if (positions.dtype() != DType::i64 || positions.shape() != Shape{x.size(0), x.size(2)}) {
      throw ValueError(str_cat(kOp, ": positions must be i64 [", x.size(0), ", ", x.size(2),
                               "] (x ", x.shape(), "), not ", dtype_name(positions.dtype()), " ",
                               positions.shape()));
    }
  }
  const Tensor given = positions.defined() ? positions.contiguous() : positions;
  const DType dtype = x.dtype();
  const Tensor out = rotate(x, rope, position_offset, false, dtype, given);
  if (auto node = make_function_node("RotaryEmbeddingBackward0", {x})) {
    node->set_backward(
        [rope, position_offset, dtype, given](BackwardContext& ctx) -> std::vector<Tensor> {
          return {rotate(ctx.grad_output(), rope, position_offset, true, dtype, given)};
        });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom

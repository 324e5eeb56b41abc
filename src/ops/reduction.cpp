// sum / mean and the broadcast-reducing sum_to_shape: the result (and sum_all's partial sums) in
// x's dtype, then the device's reduction kernels (backend/reduction_kernels.h), the same on every
// device.
#include "ops/reduction.h"

#include "autograd/function_node.h"
#include "backend/reduction_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/autocast.h"
#include "ops/elementwise.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

Tensor reduce_all(const Tensor& x, bool average, const char* op) {
  RecordFunction record(op, x);
  if (auto cast = autocast_inputs(op, {x})) return reduce_all((*cast)[0], average, op);
  check_floating(op, "x", x);
  const double factor = average ? 1.0 / static_cast<double>(x.numel()) : 1.0;
  // The partial sums' workspace comes from the op, so a dry run plans it too.
  Tensor out = Tensor::empty(Shape{}, x.dtype(), x.device());
  const int64_t partials = sum_all_partials(x.numel());
  const Tensor partial =
      partials > 0 ? Tensor::empty(Shape{partials}, DType::i64, x.device()) : Tensor();
  need_kernel(op, x.device(), &ReductionKernels::sum_all)(x.contiguous(), factor, partial, out);
  if (auto node = make_function_node(average ? "MeanBackward0" : "SumBackward0", {x})) {
    const Shape shape = x.shape();
    const DType dtype = x.dtype();
    node->set_backward([shape, factor, dtype](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor& g = ctx.grad_output();
      // The incoming gradient stays on its device: no host read, no sync.
      Tensor grad = Tensor::empty(shape, dtype, g.device());
      need_kernel("sum backward", g.device(), &ReductionKernels::fill_scaled)(grad, g.contiguous(),
                                                                              factor);
      return {grad};
    });
    node->set_outputs({out});
  }
  return out;
}

Tensor reduce_dim(const Tensor& x, int64_t dim, bool keepdim, bool average, const char* op) {
  RecordFunction record(op, x);
  if (auto cast = autocast_inputs(op, {x}))
    return reduce_dim((*cast)[0], dim, keepdim, average, op);
  check_floating(op, "x", x);
  const int64_t d = wrap_dim(dim, x.ndim());
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < x.ndim(); ++i) inner *= x.size(i);
  const int64_t n = x.size(d);
  std::vector<int64_t> out_dims;
  for (int64_t i = 0; i < x.ndim(); ++i) {
    if (i != d)
      out_dims.push_back(x.size(i));
    else if (keepdim)
      out_dims.push_back(1);
  }
  const Shape out_shape(out_dims);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  need_kernel(op, x.device(), &ReductionKernels::sum_middle)(
      x.contiguous(), outer, n, inner, average ? 1.0 / static_cast<double>(n) : 1.0, out);
  if (auto node = make_function_node(average ? "MeanBackward0" : "SumBackward0", {x})) {
    const Shape shape = x.shape();
    std::vector<int64_t> kept = shape.to_vector();
    kept[static_cast<size_t>(d)] = 1;
    const Shape kept_shape(kept);
    node->set_backward(
        [shape, kept_shape, average, n](BackwardContext& ctx) -> std::vector<Tensor> {
          // Scale the reduced gradient, not the broadcast one: outer x inner elements instead of
          // all.
          const Tensor g =
              average ? scale(ctx.grad_output(), 1.0 / static_cast<double>(n)) : ctx.grad_output();
          Tensor grad = Tensor::empty(shape, g.dtype(), g.device());
          grad.copy_(g.reshape(kept_shape).expand(shape));
          return {grad};
        });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x) { return reduce_all(x, false, "sum"); }
Tensor mean(const Tensor& x) { return reduce_all(x, true, "mean"); }
Tensor sum(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, keepdim, false, "sum");
}
Tensor mean(const Tensor& x, int64_t dim, bool keepdim) {
  return reduce_dim(x, dim, keepdim, true, "mean");
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  RecordFunction record("sum_to_shape", x);
  if (x.shape() == shape) return x;
  if (shape.ndim() > x.ndim()) {
    throw ValueError(str_cat("sum_to_shape: cannot reduce ", x.shape(), " to ", shape));
  }
  Tensor result = x;
  const int64_t lead = x.ndim() - shape.ndim();
  for (int64_t i = 0; i < lead; ++i) result = sum(result, 0, false);
  for (int64_t i = 0; i < shape.ndim(); ++i) {
    if (shape[i] == 1 && result.size(i) != 1) {
      result = sum(result, i, true);
    } else if (shape[i] != result.size(i)) {
      throw ValueError(str_cat("sum_to_shape: cannot reduce ", x.shape(), " to ", shape));
    }
  }
  return result;
}

}  // namespace headroom

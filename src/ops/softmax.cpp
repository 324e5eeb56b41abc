// softmax over any dimension; saves its output only (backward needs y, not x).
#include "ops/softmax.h"

#include <algorithm>

#include "autograd/function_node.h"
#include "backend/cpu/softmax.h"
#include "backend/softmax_kernels.h"
#include "core/record_function.h"
#include "ops/autocast.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

// x viewed as [outer, n, inner] around dimension `dim`.
struct SoftmaxDims {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
};

SoftmaxDims softmax_dims(const Shape& shape, int dim) {
  SoftmaxDims d;
  for (int i = 0; i < shape.ndim(); ++i) {
    if (i < dim) d.outer *= shape[i];
    if (i == dim) d.n = shape[i];
    if (i > dim) d.inner *= shape[i];
  }
  return d;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  RecordFunction record("softmax", x);
  if (auto cast = autocast_inputs("softmax", {x})) return softmax((*cast)[0], dim);
  check_floating("softmax", "x", x);
  // A 0-d tensor is its own single row (dim 0 or -1), as in PyTorch.
  const SoftmaxDims dims = softmax_dims(x.shape(), wrap_dim(dim, std::max(x.ndim(), 1)));
  const OpRoute route = op_route("softmax", x.device());
  Tensor out;
  if (route.native) {
    out = Tensor::empty(x.shape(), x.dtype(), x.device());
    if (route.kernels) {
      route.need(&SoftmaxKernels::forward)(x.contiguous(), dims.outer, dims.n, dims.inner, out);
    }
  } else {
    out = Tensor::empty(x.shape(), DType::f32, x.device());
    const Tensor xf = f32_contiguous(x);
    if (route.cpu) {
      cpu::softmax_forward(xf.data<float>(), out.data<float>(), dims.outer, dims.n, dims.inner);
    }
    out = to_dtype(out, x.dtype());
  }
  if (auto node = make_function_node("SoftmaxBackward0", {x})) {
    node->save(out);
    node->set_backward([dims](BackwardContext& ctx) -> std::vector<Tensor> {
      const OpRoute back = op_route("softmax backward", ctx.grad_output().device());
      if (back.native) {
        // y has x's dtype, and so has the gradient.
        const Tensor& y = ctx.saved(0);
        Tensor gx = Tensor::empty(y.shape(), y.dtype(), y.device());
        if (back.kernels) {
          back.need(&SoftmaxKernels::backward)(y.contiguous(), ctx.grad_output().contiguous(),
                                                   dims.outer, dims.n, dims.inner, gx);
        }
        return {gx};
      }
      const Tensor g = f32_contiguous(ctx.grad_output());
      const Tensor y = f32_contiguous(ctx.saved(0));
      Tensor gx = Tensor::empty(y.shape(), DType::f32, g.device());
      if (back.cpu) {
        cpu::softmax_backward(y.data<float>(), g.data<float>(), gx.data<float>(), dims.outer,
                              dims.n, dims.inner);
      }
      return {gx};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom

// softmax over any dimension: the output in x's dtype, then the device's softmax kernels
// (backend/softmax_kernels.h), the same on every device. Saves its output only (backward needs
// y, not x).
#include "ops/softmax.h"

#include <algorithm>

#include "autograd/function_node.h"
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
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  need_kernel("softmax", x.device(), &SoftmaxKernels::forward)(x.contiguous(), dims.outer, dims.n,
                                                               dims.inner, out);
  if (auto node = make_function_node("SoftmaxBackward0", {x})) {
    node->save(out);
    node->set_backward([dims](BackwardContext& ctx) -> std::vector<Tensor> {
      // y has x's dtype, and so has the gradient.
      const Tensor& y = ctx.saved(0);
      Tensor gx = Tensor::empty(y.shape(), y.dtype(), y.device());
      need_kernel("softmax backward", y.device(), &SoftmaxKernels::backward)(
          y.contiguous(), ctx.grad_output().contiguous(), dims.outer, dims.n, dims.inner, gx);
      return {gx};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom

// Autograd for views: each backward maps the gradient back onto the input's shape.
#include "ops/view_ops.h"

#include "autograd/function_node.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/reduction.h"

namespace headroom {

Tensor reshape(const Tensor& x, const Shape& shape) {
  RecordFunction record("reshape", x);
  Tensor out = x.reshape(shape).detach();
  if (auto node = make_function_node("ReshapeBackward0", {x})) {
    const Shape in = x.shape();
    node->set_backward([in](BackwardContext& ctx) -> std::vector<Tensor> {
      return {ctx.grad_output().reshape(in)};
    });
    node->set_outputs({out});
  }
  return out;
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  RecordFunction record("transpose", x);
  Tensor out = x.transpose(dim0, dim1).detach();
  if (auto node = make_function_node("TransposeBackward0", {x})) {
    node->set_backward([dim0, dim1](BackwardContext& ctx) -> std::vector<Tensor> {
      return {ctx.grad_output().transpose(dim0, dim1)};
    });
    node->set_outputs({out});
  }
  return out;
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  RecordFunction record("permute", x);
  Tensor out = x.permute(dims).detach();
  if (auto node = make_function_node("PermuteBackward0", {x})) {
    std::vector<int64_t> inverse(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) {
      inverse[static_cast<size_t>(wrap_dim(dims[i], x.ndim()))] = static_cast<int64_t>(i);
    }
    node->set_backward([inverse](BackwardContext& ctx) -> std::vector<Tensor> {
      return {ctx.grad_output().permute(inverse)};
    });
    node->set_outputs({out});
  }
  return out;
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  RecordFunction record("narrow", x);
  Tensor out = x.narrow(dim, start, length).detach();
  if (auto node = make_function_node("NarrowBackward0", {x})) {
    const Shape in = x.shape();
    const int64_t d = wrap_dim(dim, x.ndim());
    const int64_t begin = start < 0 ? start + x.size(d) : start;
    node->set_backward([in, d, begin, length](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor& g = ctx.grad_output();
      Tensor grad = Tensor::zeros(in, g.dtype(), g.device());
      grad.narrow(d, begin, length).copy_(g);
      return {grad};
    });
    node->set_outputs({out});
  }
  return out;
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  RecordFunction record("unsqueeze", x);
  return reshape(x, x.unsqueeze(dim).shape());
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  RecordFunction record("squeeze", x);
  return reshape(x, x.squeeze(dim).shape());
}

Tensor expand(const Tensor& x, const Shape& shape) {
  RecordFunction record("expand", x);
  Tensor out = x.expand(shape).detach();
  if (auto node = make_function_node("ExpandBackward0", {x})) {
    const Shape in = x.shape();
    node->set_backward([in](BackwardContext& ctx) -> std::vector<Tensor> {
      return {sum_to_shape(ctx.grad_output(), in)};
    });
    node->set_outputs({out});
  }
  return out;
}

Tensor contiguous(const Tensor& x) {
  RecordFunction record("contiguous", x);
  if (x.is_contiguous()) return x;
  Tensor out = x.contiguous().detach();
  if (auto node = make_function_node("ContiguousBackward0", {x})) {
    node->set_backward(
        [](BackwardContext& ctx) -> std::vector<Tensor> { return {ctx.grad_output()}; });
    node->set_outputs({out});
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  RecordFunction record("split", x);
  const int64_t d = wrap_dim(dim, x.ndim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw ValueError(str_cat("split: negative piece size ", s));
    total += s;
  }
  if (total != x.size(d)) {
    throw ValueError(str_cat("split: pieces sum to ", total, " but dimension ", d, " of ",
                             x.shape(), " has ", x.size(d)));
  }
  std::vector<Tensor> outs;
  int64_t start = 0;
  for (int64_t s : sizes) {
    outs.push_back(x.narrow(d, start, s).detach());
    start += s;
  }
  if (auto node = make_function_node("SplitBackward0", {x})) {
    const Shape in = x.shape();
    node->set_backward([in, d, sizes](BackwardContext& ctx) -> std::vector<Tensor> {
      DType dtype = DType::f32;
      Device device = kCPU;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (ctx.grad_output(i).defined()) {
          dtype = ctx.grad_output(i).dtype();
          device = ctx.grad_output(i).device();
          break;
        }
      }
      // Gradients already written side by side in one buffer (attention's of a fused QKV
      // projection) are that buffer: no copy.
      // (Not under create_graph: a joined view records no autograd history.)
      std::vector<Tensor> pieces;
      bool tracked = false;
      for (size_t i = 0; i < sizes.size(); ++i) {
        pieces.push_back(ctx.grad_output(i));
        tracked = tracked || (pieces.back().defined() && pieces.back().requires_grad());
      }
      if (Tensor joined = tracked ? Tensor() : Tensor::joined_view(pieces, d);
          joined.defined() && joined.shape() == in) {
        return {joined};
      }
      Tensor grad = Tensor::empty(in, dtype, device);
      int64_t begin = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        Tensor piece = grad.narrow(d, begin, sizes[i]);
        if (ctx.grad_output(i).defined())
          piece.copy_(ctx.grad_output(i));
        else
          piece.zero_();
        begin += sizes[i];
      }
      return {grad};
    });
    node->set_outputs(outs);
  }
  return outs;
}

}  // namespace headroom

// cast: Tensor::to with a backward; cast_all: many of them in one list launch.
#include "ops/cast.h"

#include "autograd/function_node.h"
#include "backend/elementwise_kernels.h"
#include "core/error.h"
#include "core/record_function.h"

namespace headroom {

namespace {

// out (x converted) becomes the output of x's ToCopyBackward0 when x requires grad.
void record_cast(const Tensor& x, const Tensor& out) {
  auto node = make_function_node("ToCopyBackward0", {x});
  if (!node) return;
  const DType input_dtype = x.dtype();
  node->set_backward([input_dtype](BackwardContext& ctx) -> std::vector<Tensor> {
    return {ctx.take_grad_output().to(input_dtype)};
  });
  // A narrowing cast's consumers may hand its gradient back already wide (function_node.h).
  const DType dtype = out.dtype();
  if (input_dtype == DType::f32 && (dtype == DType::bf16 || dtype == DType::f16)) {
    node->accept_grad_in(input_dtype);
  }
  node->set_outputs({out});
}

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  RecordFunction record("cast", x);
  Tensor out = x.to(dtype);
  record_cast(x, out);
  return out;
}

std::vector<Tensor> cast_all(const std::vector<Tensor>& xs, DType dtype) {
  std::vector<Tensor> out(xs.size());
  std::vector<Tensor> sources, targets;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    if (x.dtype() == dtype) {
      out[i] = x;
      continue;
    }
    if (!x.is_contiguous() || x.device() != xs.front().device()) {
      throw ValueError(str_cat("cast_all: tensor ", i, " ", x.shape(), " on ", x.device(),
                               " must be contiguous and on ", xs.front().device()));
    }
    out[i] = Tensor::empty(x.shape(), dtype, x.device());
    if (x.numel() == 0) continue;
    sources.push_back(x.detach());
    targets.push_back(out[i]);
  }
  if (!sources.empty()) {
    RecordFunction record("cast_all", sources.front());
    const auto& kernel =
        need_kernel("cast_all", sources.front().device(), &ElementwiseKernels::cast_list);
    for_each_list_slice(sources.size(), [&](size_t begin, size_t n) {
      kernel(TensorList(sources).subspan(begin, n), TensorList(targets).subspan(begin, n));
    });
  }
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].dtype() != dtype) record_cast(xs[i], out[i]);
  }
  return out;
}

}  // namespace headroom

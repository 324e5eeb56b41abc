// cast: Tensor::to with a backward.
#include "ops/cast.h"

#include "autograd/function_node.h"
#include "core/record_function.h"

namespace headroom {

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  RecordFunction record("cast", x);
  Tensor out = x.to(dtype);
  if (auto node = make_function_node("ToCopyBackward0", {x})) {
    const DType input_dtype = x.dtype();
    node->set_backward([input_dtype](BackwardContext& ctx) -> std::vector<Tensor> {
      return {ctx.take_grad_output().to(input_dtype)};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom

// embedding: a row gather in the weight's dtype, and a scatter-add backward that saves the ids
// only (the weight is not needed to compute its own gradient); the device's embedding kernels
// (backend/embedding_kernels.h), the same on every device.
#include "ops/embedding.h"

#include <optional>
#include <string>

#include "autograd/function_node.h"
#include "backend/embedding_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

// "[1, 3]": the position of flat element `flat` of a tensor of `shape`.
std::string position_of(int64_t flat, const Shape& shape) {
  std::vector<int64_t> index(static_cast<size_t>(shape.ndim()));
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    index[static_cast<size_t>(d)] = flat % shape[d];
    flat /= shape[d];
  }
  std::string text = "[";
  for (size_t d = 0; d < index.size(); ++d) text += (d ? ", " : "") + std::to_string(index[d]);
  return text + "]";
}

void throw_bad_id(int64_t id, int64_t flat, const Shape& shape, int64_t num_embeddings) {
  throw IndexError(str_cat("embedding: id ", id, " at ids", position_of(flat, shape),
                           " is out of range for ", num_embeddings, " embeddings"));
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids, IdCheck check,
                 std::optional<int64_t> padding_idx) {
  RecordFunction record("embedding", weight, ids);
  check_floating("embedding", "weight", weight);
  check_same_device("embedding", {weight, ids});
  if (!ids.defined() || (ids.dtype() != DType::i32 && ids.dtype() != DType::i64)) {
    throw ValueError(str_cat("embedding: ids must be i32 or i64, not ",
                             ids.defined() ? dtype_name(ids.dtype()) : "undefined"));
  }
  if (weight.ndim() != 2) {
    throw ValueError(
        str_cat("embedding: weight ", weight.shape(), " must be 2-D [num_embeddings, dim]"));
  }
  const int64_t num_embeddings = weight.size(0), dim = weight.size(1);
  if (padding_idx && (*padding_idx < 0 || *padding_idx >= num_embeddings)) {
    throw ValueError(
        str_cat("embedding: padding_idx ", *padding_idx, " is outside [0, ", num_embeddings, ")"));
  }
  std::vector<int64_t> out_dims = ids.shape().to_vector();
  out_dims.push_back(dim);
  const Device device = weight.device();
  // The ids are checked with one read back (two when one is bad).
  const Tensor id_data = ids.contiguous();
  if (const std::optional<int64_t> bad =
          check == IdCheck::by_caller
              ? std::nullopt
              : need_kernel("embedding", device, &EmbeddingKernels::first_bad_id)(id_data,
                                                                                  num_embeddings)) {
    const int64_t id = static_cast<int64_t>(id_data.reshape({-1}).narrow(0, *bad, 1).item());
    throw_bad_id(id, *bad, ids.shape(), num_embeddings);
  }
  // The gather copies rows as they are, so the table keeps its dtype and is never widened.
  Tensor out = Tensor::empty(Shape(out_dims), weight.dtype(), device);
  need_kernel("embedding", device, &EmbeddingKernels::forward)(weight.contiguous(), id_data, out);
  if (auto node = make_function_node("EmbeddingBackward0", {weight})) {
    node->save(ids);
    node->set_backward(
        [num_embeddings, dim, padding_idx](BackwardContext& ctx) -> std::vector<Tensor> {
          // The gradient is summed in f32 whatever grad_out's dtype; the kernel zeroes it first.
          const Tensor& g = ctx.grad_output();
          Tensor gw = Tensor::empty(Shape{num_embeddings, dim}, DType::f32, g.device());
          need_kernel("embedding backward", g.device(), &EmbeddingKernels::backward)(
              g.contiguous(), ctx.saved(0).contiguous(), gw);
          if (padding_idx) gw.narrow(0, *padding_idx, 1).zero_();
          return {gw};
        });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom

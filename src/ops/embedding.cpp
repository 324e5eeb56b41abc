// embedding: a row gather in the weight's dtype, and a scatter-add backward that saves the ids
// only (the weight is not needed to compute its own gradient).
#include "ops/embedding.h"

#include <string>

#include "autograd/function_node.h"
#include "backend/cpu/embedding.h"
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

template <typename Id>
void check_ids(const Tensor& ids, int64_t num_embeddings) {
  const Id* data = ids.data<Id>();
  const int64_t bad = cpu::first_bad_id(data, ids.numel(), num_embeddings);
  if (bad >= 0) throw_bad_id(static_cast<int64_t>(data[bad]), bad, ids.shape(), num_embeddings);
}

// The native path: the gather in the table's dtype, and a backward whose gradient the entry
// zeroes and scatter-adds in f32. The ids are checked with one read back (two when one is bad).
Tensor embedding_native(const OpRoute& route, const Tensor& weight, const Tensor& ids,
                        const Shape& out_shape) {
  const int64_t num_embeddings = weight.size(0), dim = weight.size(1);
  const Tensor id_data = ids.contiguous();
  if (route.kernels) {
    const int64_t bad = route.need(&EmbeddingKernels::first_bad_id)(id_data, num_embeddings);
    if (bad >= 0) {
      const int64_t id = static_cast<int64_t>(id_data.reshape({-1}).narrow(0, bad, 1).item());
      throw_bad_id(id, bad, ids.shape(), num_embeddings);
    }
  }
  Tensor out = Tensor::empty(out_shape, weight.dtype(), weight.device());
  if (route.kernels) route.need(&EmbeddingKernels::forward)(weight.contiguous(), id_data, out);
  if (auto node = make_function_node("EmbeddingBackward0", {weight})) {
    node->save(ids);
    node->set_backward([num_embeddings, dim](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor& g = ctx.grad_output();
      const OpRoute back = op_route("embedding backward", g.device());
      Tensor gw = Tensor::empty(Shape{num_embeddings, dim}, DType::f32, g.device());
      if (back.kernels) {
        back.need(&EmbeddingKernels::backward)(g.contiguous(), ctx.saved(0).contiguous(), gw);
      }
      return {gw};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  RecordFunction record("embedding", weight, ids);
  check_floating("embedding", "weight", weight);
  check_same_device("embedding", {weight, ids});
  if (!ids.defined() || (ids.dtype() != DType::i32 && ids.dtype() != DType::i64)) {
    throw ValueError(str_cat("embedding: ids must be i32 or i64, not ",
                             ids.defined() ? dtype_name(ids.dtype()) : "undefined"));
  }
  if (weight.ndim() != 2) {
    throw ValueError(str_cat("embedding: weight ", weight.shape(),
                             " must be 2-D [num_embeddings, dim]"));
  }
  const int64_t num_embeddings = weight.size(0), dim = weight.size(1);
  std::vector<int64_t> out_dims = ids.shape().to_vector();
  out_dims.push_back(dim);
  const OpRoute route = op_route("embedding", weight.device());
  if (route.native) return embedding_native(route, weight, ids, Shape(out_dims));
  const bool is_i32 = ids.dtype() == DType::i32;
  const Tensor id_data = ids.contiguous();
  const bool cpu = route.cpu;
  if (cpu) {
    if (is_i32) check_ids<int32_t>(id_data, num_embeddings);
    else check_ids<int64_t>(id_data, num_embeddings);
  }
  // The gather copies rows as they are, so the table keeps its dtype and is never widened.
  const Tensor table = weight.contiguous();
  Tensor out = Tensor::empty(Shape(out_dims), weight.dtype(), weight.device());
  if (cpu) {
    const size_t row_bytes = static_cast<size_t>(dim) * weight.element_size();
    if (is_i32) {
      cpu::embedding_gather(table.data_ptr(), id_data.data<int32_t>(), out.data_ptr(),
                            id_data.numel(), row_bytes);
    } else {
      cpu::embedding_gather(table.data_ptr(), id_data.data<int64_t>(), out.data_ptr(),
                            id_data.numel(), row_bytes);
    }
  }
  if (auto node = make_function_node("EmbeddingBackward0", {weight})) {
    node->save(ids);
    node->set_backward([num_embeddings, dim, is_i32](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor g = f32_contiguous(ctx.grad_output());
      const Tensor id_data = ctx.saved(0).contiguous();
      Tensor gw = Tensor::empty(Shape{num_embeddings, dim}, DType::f32, g.device());
      if (computes_on_cpu("embedding backward", g.device())) {
        if (is_i32) {
          cpu::embedding_backward(g.data<float>(), id_data.data<int32_t>(), gw.data<float>(),
                                  id_data.numel(), num_embeddings, dim);
        } else {
          cpu::embedding_backward(g.data<float>(), id_data.data<int64_t>(), gw.data<float>(),
                                  id_data.numel(), num_embeddings, dim);
        }
      }
      return {gw};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom

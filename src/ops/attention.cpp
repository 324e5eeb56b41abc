// scaled_dot_product_attention: shape checks, the buffers (output, log-sum-exp, backward
// workspaces) and the autograd node around the device's attention kernels
// (backend/attention_kernels.h), the same on every device. Saved for backward: q, k, v, the
// output in q's dtype and lse [B, Hq, Tq] in fp32 — never a T x T matrix.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "autograd/function_node.h"
#include "backend/attention_buffers.h"
#include "backend/attention_kernels.h"
#include "backend/dropout_kernels.h"
#include "core/error.h"
#include "core/record_function.h"
#include "ops/autocast.h"
#include "ops/op_support.h"

namespace headroom {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// x itself when its last dimension is contiguous (such as the transposed views of [B, T, H, D]
// projections that models pass) and it has `dtype`, else a contiguous copy in `dtype`: the kernels
// read and write rows at any stride.
Tensor unit_rows(const Tensor& x, DType dtype) {
  return (x.stride(3) == 1 || x.size(3) <= 1) && x.dtype() == dtype ? x : contiguous_as(x, dtype);
}

// An empty tensor of x's shape whose memory runs in the order of x's strides (PyTorch's
// empty_like for a permuted x): the output of heads viewed out of [B, T, H, D] projections is
// such a view of a [B, T, H, D] buffer itself, so the models' transpose back to [B, T, H * D] is
// a view, not a copy, and so are the gradients of the projections.
Tensor empty_in_layout_of(const Tensor& x, DType dtype) {
  std::vector<int64_t> order = {0, 1, 2, 3};
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return x.stride(a) > x.stride(b); });
  std::vector<int64_t> inverse(4);
  std::vector<int64_t> sizes(4);
  for (int64_t i = 0; i < 4; ++i) {
    inverse[order[i]] = i;
    sizes[i] = x.size(order[i]);
  }
  return Tensor::empty(Shape(sizes), dtype, x.device()).permute(inverse);
}

// Whether q, k and v are the three [B, H, T, D] heads views of one [B, T, 3, H, D] projection
// (GPT-2's c_attn output, split in three and viewed as heads). Their gradients are then the same
// views of one buffer, which split's backward hands on as the projection's gradient, uncopied.
bool packed_qkv(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (q.storage() != k.storage() || q.storage() != v.storage()) return false;
  if (q.shape() != k.shape() || q.shape() != v.shape()) return false;
  if (q.strides() != k.strides() || q.strides() != v.strides()) return false;
  const int64_t t = q.size(2), width = q.size(1) * q.size(3);
  const bool heads_of_rows = q.stride(0) == t * 3 * width && q.stride(1) == q.size(3) &&
                             q.stride(2) == 3 * width && q.stride(3) == 1;
  return heads_of_rows && k.storage_offset() == q.storage_offset() + width &&
         v.storage_offset() == q.storage_offset() + 2 * width;
}

// The problem's sizes.
struct AttentionDims {
  int64_t batch;
  int64_t q_heads;
  int64_t kv_heads;
  int64_t q_len;
  int64_t kv_len;
  int64_t head_dim;
};

AttentionDims check_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                              double dropout_p, std::optional<int64_t> sliding_window) {
  check_floating(kOp, "q", q);
  check_floating(kOp, "k", k);
  check_floating(kOp, "v", v);
  check_same_device(kOp, {q, k, v});
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) {
    throw ValueError(str_cat(kOp, ": q, k and v must share a dtype, got ", dtype_name(q.dtype()),
                             ", ", dtype_name(k.dtype()), " and ", dtype_name(v.dtype())));
  }
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) {
    throw ValueError(str_cat(kOp, ": q ", q.shape(), ", k ", k.shape(), " and v ", v.shape(),
                             " must be 4-D [B, H, T, D]"));
  }
  if (k.shape() != v.shape()) {
    throw ValueError(str_cat(kOp, ": k ", k.shape(), " and v ", v.shape(), " must have one shape"));
  }
  if (k.size(0) != q.size(0) || k.size(3) != q.size(3)) {
    throw ValueError(str_cat(kOp, ": q ", q.shape(), " and k ", k.shape(),
                             " must agree in batch (dim 0) and head size (dim 3)"));
  }
  if (q.size(3) < 1) throw ValueError(str_cat(kOp, ": head size of q ", q.shape(), " is 0"));
  if (k.size(1) < 1 || q.size(1) % k.size(1) != 0) {
    throw ValueError(str_cat(kOp, ": q has ", q.size(1), " heads, not a multiple of the ",
                             k.size(1), " heads of k and v"));
  }
  if (is_causal && q.size(2) != k.size(2)) {
    throw ValueError(str_cat(kOp, ": is_causal needs as many queries as keys, got q length ",
                             q.size(2), " and k length ", k.size(2)));
  }
  if (sliding_window && (!is_causal || *sliding_window < 1)) {
    throw ValueError(str_cat(kOp, ": sliding_window ", *sliding_window,
                             " must be positive and needs is_causal"));
  }
  if (!(dropout_p >= 0.0 && dropout_p < 1.0)) {
    throw ValueError(str_cat(kOp, ": dropout_p ", dropout_p, " must lie in [0, 1)"));
  }
  return {q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
}

// Saved for backward: the inputs as given, the output in q's dtype and lse (f32).
void save_for_backward(FunctionNode& node, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse) {
  for (const Tensor* t : {&q, &k, &v, &out, &lse}) node.save(*t);
}

}  // namespace

namespace {
thread_local int64_t accumulator_budget = kAttentionAccumulatorBytes;
}  // namespace

AttentionAccumulatorBudget::AttentionAccumulatorBudget(int64_t bytes)
    : previous_(accumulator_budget) {
  accumulator_budget = bytes;
}

AttentionAccumulatorBudget::~AttentionAccumulatorBudget() { accumulator_budget = previous_; }

int64_t attention_backward_kv_heads(const Tensor& q, int64_t kv_heads, bool dropout) {
  if (dropout || q.dtype() == DType::f32 || kv_heads <= 1 || q.numel() == 0) return kv_heads;
  const int64_t per_kv_head = q.numel() / kv_heads * 4;  // fp32 dQ of one group
  const int64_t fit = std::max<int64_t>(1, accumulator_budget / per_kv_head);
  if (fit >= kv_heads) return kv_heads;
  // Equal calls: the fewest that keep each group's accumulator within the budget.
  const int64_t calls = (kv_heads + fit - 1) / fit;
  return (kv_heads + calls - 1) / calls;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool is_causal, std::optional<double> scale, double dropout_p,
                                    Generator* generator, std::optional<int64_t> sliding_window,
                                    std::optional<double> softcap,
                                    const AttentionSequences& sequences) {
  RecordFunction record("scaled_dot_product_attention", q, k, v);
  if (auto cast = autocast_inputs("scaled_dot_product_attention", {q, k, v})) {
    return scaled_dot_product_attention((*cast)[0], (*cast)[1], (*cast)[2], is_causal, scale,
                                        dropout_p, generator, sliding_window, softcap, sequences);
  }
  if (softcap && !(*softcap > 0.0)) {
    throw ValueError(str_cat(kOp, ": softcap ", *softcap, " must be positive"));
  }
  const float cap = softcap ? static_cast<float>(*softcap) : 0.0f;
  const AttentionDims dims = check_attention(q, k, v, is_causal, dropout_p, sliding_window);
  check_attention_sequences(kOp, q, k, is_causal, sequences);
  // The kernels' window: 0 when none, or when it covers every key anyway.
  const int64_t window = sliding_window && *sliding_window < dims.kv_len ? *sliding_window : 0;
  const float softmax_scale =
      static_cast<float>(scale.value_or(1.0 / std::sqrt(static_cast<double>(dims.head_dim))));
  DropoutParams dropout;
  if (dropout_p > 0.0) {
    const uint64_t n = static_cast<uint64_t>(dims.batch * dims.q_heads * dims.q_len * dims.kv_len);
    const PhiloxState rng = (generator ? *generator : default_generator()).reserve(n);
    dropout = {static_cast<float>(dropout_p), rng.seed, rng.offset};
  }
  // out in q's dtype and lse; no fp32 copies of q, k or v on any device.
  const Device device = q.device();
  Tensor out = empty_in_layout_of(q, q.dtype());
  Tensor lse = Tensor::empty(Shape{dims.batch, dims.q_heads, dims.q_len}, DType::f32, device);
  const DType dtype = q.dtype();
  need_kernel(kOp, device, &AttentionKernels::forward)(
      unit_rows(q, dtype), unit_rows(k, dtype), unit_rows(v, dtype), is_causal, window,
      softmax_scale, cap, dropout, out, lse, sequences);
  if (auto node = make_function_node("ScaledDotProductAttentionBackward0", {q, k, v})) {
    save_for_backward(*node, q, k, v, out, lse);
    node->set_backward([is_causal, window, softmax_scale, cap, dropout,
                        sequences](BackwardContext& ctx) -> std::vector<Tensor> {
      const Tensor& q = ctx.saved(0);
      const Tensor& k = ctx.saved(1);
      const Tensor& lse = ctx.saved(4);
      const DType dtype = q.dtype();
      const Device device = q.device();
      const Tensor g = unit_rows(ctx.grad_output(), dtype);
      // The three gradients in q's dtype, laid out as q, k and v are; the kernel's workspaces
      // per group of heads (Note [Attention backward by head groups]).
      Tensor gq, gk, gv;
      if (packed_qkv(q, k, ctx.saved(2))) {
        const Tensor packed =
            Tensor::empty(Shape{q.size(0), q.size(2), 3, q.size(1), q.size(3)}, dtype, device);
        gq = packed.select(2, 0).transpose(1, 2);
        gk = packed.select(2, 1).transpose(1, 2);
        gv = packed.select(2, 2).transpose(1, 2);
      } else {
        gq = empty_in_layout_of(q, dtype);
        gk = empty_in_layout_of(k, dtype);
        gv = empty_in_layout_of(ctx.saved(2), dtype);
      }
      const Tensor qr = unit_rows(q, dtype), kr = unit_rows(k, dtype);
      const Tensor vr = unit_rows(ctx.saved(2), dtype);
      const Tensor& out = ctx.saved(3);
      const int64_t kv_heads = k.size(1), group = q.size(1) / kv_heads;
      const int64_t per_call = attention_backward_kv_heads(q, kv_heads, dropout.p > 0.0f);
      Tensor delta, gq_accum;  // made for the first call, reused by those of its size
      const auto backward =
          need_kernel("scaled_dot_product_attention backward", device, &AttentionKernels::backward);
      for (int64_t h = 0; h < kv_heads; h += per_call) {
        const int64_t n = std::min(per_call, kv_heads - h);
        auto heads = [&](const Tensor& t, int64_t width) {
          return n == kv_heads ? t : t.narrow(1, h * width, n * width);
        };
        // lse and delta are dense rows for the kernels: a head group of a batch of more than one
        // is not, so it is copied (B x heads x T floats).
        Tensor group_lse = heads(lse, group);
        if (!group_lse.is_contiguous()) group_lse = group_lse.contiguous();
        if (!delta.defined() || delta.shape() != group_lse.shape()) {
          if (dtype == DType::f32) {
            delta = Tensor::empty(group_lse.shape(), DType::f32, device);
          } else {
            // One allocation, the accumulator then delta: see Note [Attention backward workspace].
            const Shape accum_shape = heads(q, group).shape();
            const int64_t rows = group_lse.numel(), accum = accum_shape.numel();
            const Tensor workspace = Tensor::empty(Shape{accum + rows}, DType::f32, device);
            gq_accum = workspace.narrow(0, 0, accum).view(accum_shape);
            delta = workspace.narrow(0, accum, rows).view(group_lse.shape());
          }
        }
        backward(heads(qr, group), heads(kr, 1), heads(vr, 1), heads(out, group), heads(g, group),
                 group_lse, is_causal, window, softmax_scale, cap, dropout, delta, heads(gq, group),
                 heads(gk, 1), heads(gv, 1), gq_accum, sequences);
      }
      return {gq, gk, gv};
    });
    node->set_outputs({out});
  }
  return out;
}

}  // namespace headroom

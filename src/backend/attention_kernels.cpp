// The kernel census's cost of the attention entries (backend/attention_kernels.h).
#include "backend/attention_kernels.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.h"

namespace headroom {
namespace {

int64_t bytes_of(std::initializer_list<const Tensor*> tensors) {
  int64_t bytes = 0;
  for (const Tensor* t : tensors) bytes += t->defined() ? static_cast<int64_t>(t->nbytes()) : 0;
  return bytes;
}

// The visible pairs of one sequence of t queries against s keys: half of t x s when causal; with
// a window w < t about t w - w^2 / 2 (the causal half when w = t).
double visible_pairs(double t, double s, bool causal, int64_t window) {
  if (causal && window > 0 && static_cast<double>(window) < t) {
    const double w = static_cast<double>(window);
    return t * w - 0.5 * w * w;
  }
  return t * s * (causal ? 0.5 : 1.0);
}

KernelWork attention_work(const Tensor& q, const Tensor& k, bool causal, int64_t window,
                          const AttentionSequences& sequences, double passes, int64_t bytes) {
  KernelWork w;
  const double b = static_cast<double>(q.size(0)), h = static_cast<double>(q.size(1)),
               t = static_cast<double>(q.size(2)), s = static_cast<double>(k.size(2)),
               d = static_cast<double>(q.size(3));
  // A packed batch: the pairs of each sequence (b counts none twice).
  double pairs = b * visible_pairs(t, s, causal, window);
  if (sequences.packed() && sequences.host) {
    const std::vector<int32_t>& cu = *sequences.host;
    pairs = 0.0;
    for (size_t n = 0; n + 1 < cu.size(); ++n) {
      const double len = static_cast<double>(cu[n + 1] - cu[n]);
      pairs += visible_pairs(len, len, causal, window);
    }
  }
  w.flops = passes * 4.0 * h * pairs * d;
  w.precision = q.dtype() == DType::f32 ? FlopPrecision::fp32 : FlopPrecision::sixteen_bit;
  w.bytes = bytes + bytes_of({&sequences.cu_seqlens});
  w.shape =
      str_cat(q.size(0), " x ", q.size(1), "/", k.size(1), " x ", q.size(2), " x ", q.size(3),
              causal ? " causal" : "", window > 0 ? str_cat(" window ", window) : std::string(),
              sequences.packed() ? str_cat(" ", sequences.cu_seqlens.numel() - 1, " sequences")
                                 : std::string());
  return w;
}

}  // namespace

KernelWork attention_forward_cost(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                  int64_t window, float, float, DropoutParams, const Tensor& out,
                                  const Tensor& lse, const AttentionSequences& sequences) {
  return attention_work(q, k, causal, window, sequences, 1.0, bytes_of({&q, &k, &v, &out, &lse}));
}

KernelWork attention_backward_cost(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& grad_out, const Tensor& lse,
                                   bool causal, int64_t window, float, float, DropoutParams,
                                   const Tensor& delta, const Tensor& grad_q, const Tensor& grad_k,
                                   const Tensor& grad_v, const Tensor& grad_q_accum,
                                   const AttentionSequences& sequences) {
  return attention_work(q, k, causal, window, sequences, 2.5,
                        bytes_of({&q, &k, &v, &out, &grad_out, &lse, &delta, &grad_q, &grad_k,
                                  &grad_v, &grad_q_accum}));
}

}  // namespace headroom

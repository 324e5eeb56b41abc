// The kernel census's cost of the attention entries (backend/attention_kernels.h).
#include "backend/attention_kernels.h"

#include <initializer_list>
#include <string>

#include "core/error.h"

namespace headroom {
namespace {

int64_t bytes_of(std::initializer_list<const Tensor*> tensors) {
  int64_t bytes = 0;
  for (const Tensor* t : tensors) bytes += t->defined() ? static_cast<int64_t>(t->nbytes()) : 0;
  return bytes;
}

KernelWork attention_work(const Tensor& q, const Tensor& k, bool causal, int64_t window,
                          double passes, int64_t bytes) {
  KernelWork w;
  const double b = static_cast<double>(q.size(0)), h = static_cast<double>(q.size(1)),
               t = static_cast<double>(q.size(2)), s = static_cast<double>(k.size(2)),
               d = static_cast<double>(q.size(3));
  // The visible pairs: half of T x S when causal; with a window w < T about T w - w^2 / 2
  // (the causal half when w = T).
  double pairs = t * s * (causal ? 0.5 : 1.0);
  if (causal && window > 0 && static_cast<double>(window) < t) {
    const double w = static_cast<double>(window);
    pairs = t * w - 0.5 * w * w;
  }
  w.flops = passes * 4.0 * b * h * pairs * d;
  w.precision = q.dtype() == DType::f32 ? FlopPrecision::fp32 : FlopPrecision::sixteen_bit;
  w.bytes = bytes;
  w.shape =
      str_cat(q.size(0), " x ", q.size(1), "/", k.size(1), " x ", q.size(2), " x ", q.size(3),
              causal ? " causal" : "", window > 0 ? str_cat(" window ", window) : std::string());
  return w;
}

}  // namespace

KernelWork attention_forward_cost(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                  int64_t window, float, float, DropoutParams, const Tensor& out,
                                  const Tensor& lse) {
  return attention_work(q, k, causal, window, 1.0, bytes_of({&q, &k, &v, &out, &lse}));
}

KernelWork attention_backward_cost(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& grad_out, const Tensor& lse,
                                   bool causal, int64_t window, float, float, DropoutParams,
                                   const Tensor& delta, const Tensor& grad_q, const Tensor& grad_k,
                                   const Tensor& grad_v, const Tensor& grad_q_accum) {
  return attention_work(q, k, causal, window, 2.5,
                        bytes_of({&q, &k, &v, &out, &grad_out, &lse, &delta, &grad_q, &grad_k,
                                  &grad_v, &grad_q_accum}));
}

}  // namespace headroom

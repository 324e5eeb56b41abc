// The kernel census's cost of the attention entries (backend/attention_kernels.h).
#include "backend/attention_kernels.h"

#include <initializer_list>

#include "core/error.h"

namespace headroom {
namespace {

int64_t bytes_of(std::initializer_list<const Tensor*> tensors) {
  int64_t bytes = 0;
  for (const Tensor* t : tensors) bytes += t->defined() ? static_cast<int64_t>(t->nbytes()) : 0;
  return bytes;
}

KernelWork attention_work(const Tensor& q, const Tensor& k, bool causal, double passes,
                          int64_t bytes) {
  KernelWork w;
  const double b = static_cast<double>(q.size(0)), h = static_cast<double>(q.size(1)),
               t = static_cast<double>(q.size(2)), s = static_cast<double>(k.size(2)),
               d = static_cast<double>(q.size(3));
  w.flops = passes * 4.0 * b * h * t * s * d * (causal ? 0.5 : 1.0);
  w.precision = q.dtype() == DType::f32 ? FlopPrecision::fp32 : FlopPrecision::sixteen_bit;
  w.bytes = bytes;
  w.shape = str_cat(q.size(0), " x ", q.size(1), "/", k.size(1), " x ", q.size(2), " x ", q.size(3),
                    causal ? " causal" : "");
  return w;
}

}  // namespace

KernelWork attention_forward_cost(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                  float, DropoutParams, const Tensor& out, const Tensor& lse) {
  return attention_work(q, k, causal, 1.0, bytes_of({&q, &k, &v, &out, &lse}));
}

KernelWork attention_backward_cost(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& grad_out, const Tensor& lse,
                                   bool causal, float, DropoutParams, const Tensor& delta,
                                   const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                                   const Tensor& grad_q_accum) {
  return attention_work(q, k, causal, 2.5,
                        bytes_of({&q, &k, &v, &out, &grad_out, &lse, &delta, &grad_q, &grad_k,
                                  &grad_v, &grad_q_accum}));
}

}  // namespace headroom

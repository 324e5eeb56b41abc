// Which attention problems the CUDA backend offers cuDNN (Note [Attention through cuDNN] in
// backend/cuda/cudnn_attention.h): the check reads only dtypes, shapes, strides and addresses, so
// it runs here on CPU tensors, in every build that has the CUDA backend, GPU or not.
#ifdef HEADROOM_WITH_CUDA

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cudnn_attention.h"
#include "core/tensor.h"

namespace headroom {
namespace {

using cuda::cudnn_attention_backward_refusal;
using cuda::cudnn_attention_refusal;

struct Problem {
  Tensor q, k, v, out, lse;
};

// q [B, Hq, T, D], k / v [B, Hkv, S, D], out like q, lse [B, Hq, T]: contiguous, fresh.
Problem contiguous(DType dtype, int64_t b, int64_t hq, int64_t hkv, int64_t t, int64_t s,
                   int64_t d) {
  return {Tensor::empty({b, hq, t, d}, dtype), Tensor::empty({b, hkv, s, d}, dtype),
          Tensor::empty({b, hkv, s, d}, dtype), Tensor::empty({b, hq, t, d}, dtype),
          Tensor::empty({b, hq, t}, DType::f32)};
}

// q, k and v as heads views of one [B, T, (Hq + 2 Hkv) D + pad] projection starting `shift`
// elements into its buffer.
Problem fused(int64_t b, int64_t hq, int64_t hkv, int64_t t, int64_t d, int64_t pad = 0,
              int64_t shift = 0) {
  const int64_t width = (hq + 2 * hkv) * d + pad;
  const Tensor buffer = Tensor::empty({b * t * width + shift}, DType::bf16);
  const Tensor x = buffer.narrow(0, shift, b * t * width).view({b, t, width});
  auto heads = [&](int64_t first, int64_t count) {
    return x.narrow(2, first * d, count * d).view({b, t, count, d}).transpose(1, 2);
  };
  return {heads(0, hq), heads(hq, hkv), heads(hq + hkv, hkv),
          Tensor::empty({b, t, hq, d}, DType::bf16).transpose(1, 2),
          Tensor::empty({b, hq, t}, DType::f32)};
}

std::string refusal(const Problem& p, bool causal = true, int64_t window = 0, float softcap = 0,
                    DropoutParams dropout = {}, const AttentionSequences& sequences = {}) {
  const char* why = cudnn_attention_refusal(p.q, p.k, p.v, p.out, p.lse, causal, window, softcap,
                                            dropout, sequences);
  return why ? why : "";
}

TEST(CudnnAttentionEligibility, OffersBf16AndF16Problems) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    EXPECT_EQ(refusal(contiguous(dtype, 2, 8, 2, 128, 128, 64)), "");
    EXPECT_EQ(refusal(contiguous(dtype, 2, 8, 8, 100, 100, 128)), "");
    EXPECT_EQ(refusal(contiguous(dtype, 1, 4, 2, 37, 91, 64), false), "");  // T != S
    EXPECT_EQ(refusal(contiguous(dtype, 1, 4, 2, 64, 64, 256)), "");
    EXPECT_EQ(refusal(contiguous(dtype, 1, 4, 2, 300, 300, 64), true, 5), "");  // a window
  }
}

TEST(CudnnAttentionEligibility, OffersViewsOfAFusedProjection) {
  EXPECT_EQ(refusal(fused(2, 8, 2, 128, 64)), "");
  EXPECT_EQ(refusal(fused(2, 32, 8, 64, 128)), "");
}

TEST(CudnnAttentionEligibility, KeepsWhatCudnnCannotComputeAsWeDo) {
  EXPECT_EQ(refusal(contiguous(DType::f32, 2, 8, 2, 128, 128, 64)), "not bf16 or f16");
  const Problem p = contiguous(DType::bf16, 2, 8, 2, 128, 128, 64);
  EXPECT_EQ(refusal(p, true, 0, 0.0f, DropoutParams{0.1f, 1, 0}), "dropout");
  EXPECT_EQ(refusal(p, true, 0, 50.0f), "softcap");
  auto host = std::make_shared<std::vector<int32_t>>(std::vector<int32_t>{0, 100, 128, 256});
  const AttentionSequences packed{Tensor::from_ints({0, 100, 128, 256}, {4}, DType::i32), host};
  EXPECT_EQ(refusal(p, true, 0, 0.0f, {}, packed), "packed sequences");
  EXPECT_EQ(refusal(contiguous(DType::bf16, 1, 2, 2, 70, 70, 36)), "head size");
  EXPECT_EQ(refusal(contiguous(DType::bf16, 1, 2, 2, 70, 70, 264)), "head size");
}

TEST(CudnnAttentionEligibility, KeepsUnalignedOperands) {
  // A row stride of 4 more elements than the heads: not a multiple of 8.
  EXPECT_EQ(refusal(fused(2, 8, 2, 64, 64, 4)), "strides or alignment");
  // The projection 4 bytes into its buffer: no operand 16-byte aligned.
  EXPECT_EQ(refusal(fused(2, 8, 2, 64, 64, 0, 2)), "strides or alignment");
  // lse at an odd offset, as a head group's view of a batch of one can be.
  Problem p = contiguous(DType::bf16, 1, 4, 4, 65, 65, 64);
  p.lse = Tensor::empty({1, 8, 65}, DType::f32).narrow(1, 1, 4);
  EXPECT_EQ(refusal(p), "strides or alignment");
}

TEST(CudnnAttentionEligibility, BackwardChecksTheGradientsToo) {
  const Problem p = fused(2, 8, 2, 128, 64);
  const Tensor grad_out = Tensor::empty(p.q.shape(), DType::bf16);
  const Problem grads = fused(2, 8, 2, 128, 64);
  EXPECT_EQ(cudnn_attention_backward_refusal(p.q, p.k, p.v, p.out, grad_out, p.lse, grads.q,
                                             grads.k, grads.v, true, 0, 0.0f, {}, {}),
            nullptr);
  const Problem unaligned = fused(2, 8, 2, 128, 64, 0, 2);
  const char* why =
      cudnn_attention_backward_refusal(p.q, p.k, p.v, p.out, grad_out, p.lse, unaligned.q,
                                       unaligned.k, unaligned.v, true, 0, 0.0f, {}, {});
  EXPECT_EQ(std::string(why ? why : ""), "strides or alignment");
}

}  // namespace
}  // namespace headroom

#endif  // HEADROOM_WITH_CUDA

// Packed sequences on the GPU (Note [Packed sequences in attention]): a packed batch's loss and
// every parameter gradient through GPT-2 and Llama equal the same sequences run one by one on the
// GPU, and the packed attention and rotary kernels agree with the CPU's (their op-harness cases,
// attention/packed_* and rotary/positions, run here through cuda/test_cuda_op_harness.cpp).
#include "cuda/cuda_test_support.h"
#include "nn/packed_batches.h"

namespace headroom {
namespace {

using namespace packed_test;

// The GPU's attention tiles rows from position 0, not from each sequence's start as the CPU does,
// and cuBLAS picks its GEMM algorithm per shape, so the two runs sum in more different orders than
// on the CPU; fp32 throughout, 1e-4 of each tensor's largest magnitude still bounds them (about
// n u with n up to a few hundred terms a sum).
constexpr double kGpuRtol = 1e-4;

TEST(CudaPacking, PaddingFreeBfdBatchEqualsSequencesOneByOne) {
  REQUIRE_GPU();
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    expect_packed_equals_one_by_one(preset, bfd_packed(3), kGpu, kGpuRtol);
  }
}

TEST(CudaPacking, TwoPackedRowsEqualSequencesOneByOne) {
  REQUIRE_GPU();
  const std::vector<TokenSequence> s = random_sequences({9, 23, 17, 15}, 256, 5);
  const Packed packed = two_rows({{s[0], s[1]}, {s[2], s[3]}});
  for (const char* preset : {"gpt2-tiny", "llama-tiny"}) {
    expect_packed_equals_one_by_one(preset, packed, kGpu, kGpuRtol);
  }
}

}  // namespace
}  // namespace headroom

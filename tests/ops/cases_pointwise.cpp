// Harness cases for the point-wise ops: activations, softmax, dropout and embedding. Each op has
// a case larger than its kernels' serial grain (so the OpenMP path runs) and odd sizes.
#include <string>
#include <utility>
#include <vector>

#include "core/generator.h"
#include "ops/op_harness.h"
#include "ops/ops.h"

namespace headroom::testing {

namespace {

// Dropout with a fixed generator state, so the case is a pure function of its input.
Tensor seeded_dropout(const Tensor& x, double p) {
  Generator gen(2024);
  gen.set_offset(17);
  return dropout(x, p, true, &gen);
}

// An input that is not differentiated (its gradient is not requested).
OpInput constant(OpInput in) {
  in.differentiable = false;
  return in;
}

}  // namespace

HEADROOM_OP_CASES(pointwise_cases) {
  using In = const std::vector<Tensor>&;
  auto gelu_fn = [](In in) { return gelu(in[0]); };
  register_op_case({"gelu/2x3x5", {normal({2, 3, 5})}, gelu_fn});
  register_op_case({"gelu/wide_range", {normal({7, 13}, 4.0)}, gelu_fn});
  register_op_case({"gelu/parallel", {normal({5, 7001})}, gelu_fn});
  auto silu_fn = [](In in) { return silu(in[0]); };
  register_op_case({"silu/3x7", {normal({3, 7}, 3.0)}, silu_fn});
  register_op_case({"silu/parallel", {normal({3, 11111})}, silu_fn});
  auto swiglu_fn = [](In in) { return swiglu(in[0], in[1]); };
  register_op_case({"swiglu/2x9", {normal({2, 9}, 2.0), normal({2, 9})}, swiglu_fn});
  register_op_case({"swiglu/parallel", {normal({4, 9001}), normal({4, 9001})}, swiglu_fn});
  register_op_case(
      {"swiglu/gate_grad_only", {normal({3, 5}), constant(normal({3, 5}))}, swiglu_fn});
  register_op_case({"swiglu/up_grad_only", {constant(normal({3, 5})), normal({3, 5})}, swiglu_fn});
  auto geglu_fn = [](In in) { return geglu(in[0], in[1]); };
  register_op_case({"geglu/2x9", {normal({2, 9}, 2.0), normal({2, 9})}, geglu_fn});
  register_op_case({"geglu/parallel", {normal({4, 9001}), normal({4, 9001})}, geglu_fn});
  register_op_case({"geglu/gate_grad_only", {normal({3, 5}), constant(normal({3, 5}))}, geglu_fn});
  // Values of several caps, so that tanh saturates for some and is near linear for others.
  register_op_case(
      {"softcap/3x40", {normal({3, 40}, 4.0)}, [](In in) { return softcap(in[0], 2.0); }});
  register_op_case(
      {"softcap/parallel", {normal({8, 9001}, 30.0)}, [](In in) { return softcap(in[0], 30.0); }});

  register_op_case(
      {"softmax/last_dim", {normal({3, 11}, 2.0)}, [](In in) { return softmax(in[0]); }});
  register_op_case(
      {"softmax/first_dim", {normal({6, 5})}, [](In in) { return softmax(in[0], 0); }});
  // inner = 300 columns: more than one tile of the strided kernel.
  register_op_case(
      {"softmax/middle_dim_tiles", {normal({2, 3, 300})}, [](In in) { return softmax(in[0], 1); }});
  register_op_case(
      {"softmax/parallel_rows", {normal({40, 1001})}, [](In in) { return softmax(in[0], -1); }});
  register_op_case({"softmax/transposed_input", {normal({5, 4})}, [](In in) {
                      return softmax(transpose(in[0], 0, 1), -1);
                    }});

  register_op_case(
      {"dropout/3x5", {normal({3, 5})}, [](In in) { return seeded_dropout(in[0], 0.3); }});
  // 7 x 1001: several 1024-element chunks, the last one partial and not a multiple of 4.
  register_op_case(
      {"dropout/chunks", {normal({7, 1001})}, [](In in) { return seeded_dropout(in[0], 0.5); }});
  register_op_case(
      {"dropout/parallel", {normal({5, 4099})}, [](In in) { return seeded_dropout(in[0], 0.1); }});

  auto dropout_add_fn = [](In in) {
    Generator gen(2024);
    gen.set_offset(17);
    return dropout_add(in[0], in[1], 0.3, true, &gen);
  };
  // In bf16 / f16 the dropped x is rounded before the add, as add(residual, dropout(x)) rounds
  // it: two roundings, not one, so the low-precision check is the bit-for-bit comparison with
  // those two ops (Dropout.DropoutAddIsAddOfDropoutBitForBit) instead of this harness's.
  auto dropout_add_case = [&](std::string name, std::vector<OpInput> inputs) {
    OpCase c{std::move(name), std::move(inputs), dropout_add_fn};
    c.low_precision = {};
    register_op_case(std::move(c));
  };
  dropout_add_case("dropout_add/3x5", {normal({3, 5}), normal({3, 5})});
  dropout_add_case("dropout_add/parallel", {normal({5, 4099}), normal({5, 4099})});
  dropout_add_case("dropout_add/branch_grad_only", {constant(normal({3, 5})), normal({3, 5})});

  auto embedding_fn = [](In in) { return embedding(in[0], in[1]); };
  register_op_case({"embedding/small", {normal({10, 6}), ids({2, 3}, 10)}, embedding_fn});
  // dim 70: more than one 64-column block of the backward; ids repeat across 37 tokens.
  register_op_case({"embedding/repeated_ids", {normal({9, 70}), ids({37}, 9)}, embedding_fn});
  register_op_case({"embedding/i32_parallel", {normal({100, 130}), ids({4, 75}, 100)}, [](In in) {
                      return embedding(in[0], in[1].to(DType::i32));
                    }});
}

}  // namespace headroom::testing

// Harness cases for layer_norm, rms_norm, cross_entropy and linear_cross_entropy. Row counts
// above 32 split the norm backward into uneven row blocks; linear_cross_entropy_chunked with a
// small chunk splits the tokens unevenly.
#include "ops/op_harness.h"
#include "core/generator.h"
#include "ops/ops.h"

namespace headroom::testing {

namespace {

using Inputs = const std::vector<Tensor>&;

// The residual norms round their sum to the dtype before the norm reads it, as add does; the
// norm's result then carries that rounding times about rstd * weight (a few units at most).
OpCase with_sum_rounding(OpCase c) {
  c.rounded_intermediate_units = 8.0;
  return c;
}

// An input that takes no part in the gradient check (a fixed scale).
OpInput fixed(OpInput in) {
  in.differentiable = false;
  return in;
}

}  // namespace

HEADROOM_OP_CASES(norm_loss_cases) {
  register_op_case({"layer_norm/affine_3d",
                    {normal({2, 3, 7}), positive({7}), normal({7})},
                    [](Inputs in) { return layer_norm(in[0], in[1], in[2]); }});
  register_op_case({"layer_norm/no_affine", {normal({5, 16}, 2.0)}, [](Inputs in) {
                      return layer_norm(in[0], Tensor(), Tensor());
                    }});
  register_op_case({"layer_norm/weight_only_eps", {normal({4, 33}), normal({33})}, [](Inputs in) {
                      return layer_norm(in[0], in[1], Tensor(), 1e-2);
                    }});
  register_op_case({"layer_norm/many_rows",
                    {normal({130, 5}), normal({5}), normal({5})},
                    [](Inputs in) { return layer_norm(in[0], in[1], in[2]); }});
  register_op_case({"rms_norm/3d", {normal({2, 3, 8}), positive({8})}, [](Inputs in) {
                      return rms_norm(in[0], in[1]);
                    }});
  register_op_case({"rms_norm/odd_dim", {normal({37, 17}), normal({17})}, [](Inputs in) {
                      return rms_norm(in[0], in[1], 1e-5);
                    }});
  register_op_case({"rms_norm/many_rows_no_weight", {normal({130, 6})}, [](Inputs in) {
                      return rms_norm(in[0], Tensor());
                    }});
  // Gemma's (1 + w): weights centred on 0, as Gemma stores them.
  register_op_case({"rms_norm/unit_offset", {normal({37, 17}), normal({17}, 0.3)}, [](Inputs in) {
                      return rms_norm(in[0], in[1], 1e-6, std::nullopt, 1.0);
                    }});
  // The residual norms (Note [Residual norms]): both results reach the loss, the sum scaled
  // by a fixed input so that the two gradients differ.
  register_op_case(with_sum_rounding(
      {"add_layer_norm/branch",
       {normal({2, 3, 7}), normal({2, 3, 7}), positive({7}), normal({7}), fixed(normal({2, 3, 7}))},
       [](Inputs in) {
         const ResidualNorm r = add_layer_norm(in[0], in[1], in[2], in[3]);
         return add(mul(r.sum, in[4]), r.out);
       }}));
  register_op_case(
      with_sum_rounding({"add_layer_norm/no_branch_many_rows",
                         {normal({130, 5}), normal({5}), normal({5}), fixed(normal({130, 5}))},
                         [](Inputs in) {
                           const ResidualNorm r = add_layer_norm(in[0], Tensor(), in[1], in[2]);
                           return add(mul(r.sum, in[3]), r.out);
                         }}));
  register_op_case(with_sum_rounding(
      {"add_layer_norm/dropout",
       {normal({4, 33}), normal({4, 33}), positive({33}), normal({33}), fixed(normal({4, 33}))},
       [](Inputs in) {
         Generator generator(7);
         const ResidualNorm r = add_layer_norm(in[0], in[1], in[2], in[3], 1e-5, std::nullopt,
                                               {0.25, true, &generator});
         return add(mul(r.sum, in[4]), r.out);
       }}));
  register_op_case(with_sum_rounding(
      {"add_rms_norm/branch_odd_dim",
       {normal({37, 17}), normal({37, 17}), normal({17}), fixed(normal({37, 17}))},
       [](Inputs in) {
         const ResidualNorm r = add_rms_norm(in[0], in[1], in[2], 1e-5);
         return add(mul(r.sum, in[3]), r.out);
       }}));
  register_op_case(with_sum_rounding(
      {"add_rms_norm/no_branch_unit_offset",
       {normal({37, 17}), normal({17}, 0.3), fixed(normal({37, 17}))},
       [](Inputs in) {
         const ResidualNorm r = add_rms_norm(in[0], Tensor(), in[1], 1e-6, std::nullopt, 1.0);
         return add(mul(r.sum, in[2]), r.out);
       }}));
  register_op_case({"cross_entropy/2d_ignored",
                    {normal({6, 11}, 2.0), ids({6}, 11, 0.3)},
                    [](Inputs in) { return cross_entropy(in[0], in[1]); }});
  register_op_case({"cross_entropy/3d", {normal({2, 5, 7}), ids({2, 5}, 7, 0.2)}, [](Inputs in) {
                      return cross_entropy(in[0], in[1]);
                    }});
  register_op_case({"cross_entropy/wide_vocab",
                    {normal({3, 300}, 3.0), ids({3}, 300)},
                    [](Inputs in) { return cross_entropy(in[0], in[1]); }});
  register_op_case({"linear_cross_entropy/3d",
                    {normal({2, 5, 8}), normal({13, 8}, 0.5), ids({2, 5}, 13, 0.25)},
                    [](Inputs in) { return linear_cross_entropy(in[0], in[1], in[2]); }});
  register_op_case(
      {"linear_cross_entropy/uneven_chunks",
       {normal({10, 6}), normal({9, 6}, 0.5), ids({10}, 9, 0.2)},
       [](Inputs in) { return linear_cross_entropy_chunked(in[0], in[1], in[2], -100, 3); }});
  // Gemma 2's final logit soft-capping, at a cap the logits reach.
  register_op_case(
      {"linear_cross_entropy/softcap",
       {normal({2, 5, 8}), normal({13, 8}, 0.8), ids({2, 5}, 13, 0.25)},
       [](Inputs in) { return linear_cross_entropy(in[0], in[1], in[2], -100, -1, 1.5); }});
  register_op_case({"linear_cross_entropy/softcap_uneven_chunks",
                    {normal({10, 6}), normal({9, 6}, 0.8), ids({10}, 9, 0.2)},
                    [](Inputs in) {
                      return linear_cross_entropy_chunked(in[0], in[1], in[2], -100, 3, -1, 2.0);
                    }});
  register_op_case(
      {"linear_cross_entropy/chunk_of_one",
       {normal({7, 5}), normal({4, 5}, 0.5), ids({7}, 4, 0.3)},
       [](Inputs in) { return linear_cross_entropy_chunked(in[0], in[1], in[2], -100, 1); }});
}

}  // namespace headroom::testing

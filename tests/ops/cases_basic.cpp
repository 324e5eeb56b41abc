// Harness cases for element-wise arithmetic, reductions, matrix products and views.
#include "ops/op_harness.h"
#include "ops/ops.h"

namespace headroom::testing {

HEADROOM_OP_CASES(basic_cases) {
  register_op_case({"add/same_shape",
                    {normal({3, 4}), normal({3, 4})},
                    [](const std::vector<Tensor>& in) { return add(in[0], in[1]); }});
  register_op_case({"add/broadcast",
                    {normal({2, 3, 4}), normal({4})},
                    [](const std::vector<Tensor>& in) { return add(in[0], in[1]); }});
  register_op_case({"sub/broadcast",
                    {normal({2, 1, 4}), normal({3, 1})},
                    [](const std::vector<Tensor>& in) { return sub(in[0], in[1]); }});
  register_op_case({"mul/broadcast",
                    {normal({2, 3, 4}), normal({1, 3, 1})},
                    [](const std::vector<Tensor>& in) { return mul(in[0], in[1]); }});
  register_op_case({"scale/2d", {normal({5, 6})}, [](const std::vector<Tensor>& in) {
                      return scale(in[0], -0.375);
                    }});
  register_op_case(
      {"sum/all", {normal({4, 5})}, [](const std::vector<Tensor>& in) { return sum(in[0]); }});
  register_op_case(
      {"mean/all", {normal({4, 5})}, [](const std::vector<Tensor>& in) { return mean(in[0]); }});
  register_op_case({"sum/dim1", {normal({3, 4, 5})}, [](const std::vector<Tensor>& in) {
                      return sum(in[0], 1);
                    }});
  register_op_case({"mean/dim_last_keepdim",
                    {normal({3, 4, 5})},
                    [](const std::vector<Tensor>& in) { return mean(in[0], -1, true); }});
  register_op_case({"matmul/2d",
                    {normal({5, 7}), normal({7, 3})},
                    [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }});
  register_op_case({"matmul/batched_broadcast",
                    {normal({2, 3, 4, 5}), normal({3, 5, 6})},
                    [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }});
  register_op_case(
      {"matmul/transposed_view",
       {normal({2, 5, 4}), normal({2, 5, 3})},
       [](const std::vector<Tensor>& in) { return matmul(transpose(in[0], 1, 2), in[1]); }});
  register_op_case({"linear/bias",
                    {normal({2, 3, 8}), normal({5, 8}, 0.3), normal({5})},
                    [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }});
  register_op_case({"linear/no_bias",
                    {normal({6, 8}), normal({4, 8}, 0.3)},
                    [](const std::vector<Tensor>& in) { return linear(in[0], in[1]); }});
  register_op_case({"linear/conv1d_layout",
                    {normal({2, 4, 8}), normal({8, 12}, 0.3), normal({12})},
                    [](const std::vector<Tensor>& in) {
                      return linear(in[0], in[1], in[2], WeightLayout::in_out);
                    }});
  // linear_add: into a copy of a base the case's inputs hold, and into a fresh base layer's
  // output in place (LoRA's branch joining it; that base is rounded before the add).
  register_op_case(
      {"linear_add/copied_base",
       {normal({2, 3, 5}), normal({2, 3, 4}), normal({5, 4}, 0.3)},
       [](const std::vector<Tensor>& in) { return linear_add(in[0], in[1], in[2], 0.5); }});
  OpCase lora{"linear_add/fresh_base_in_place",
              {normal({6, 8}), normal({5, 8}, 0.3), normal({3, 8}, 0.3), normal({5, 3}, 0.3)},
              [](const std::vector<Tensor>& in) {
                return linear_add(linear(in[0], in[1]), linear(in[0], in[2]), in[3], 2.0);
              }};
  lora.rounded_intermediate_units = 4.0;
  register_op_case(std::move(lora));
  register_op_case(
      {"views/reshape_transpose_permute", {normal({2, 3, 4})}, [](const std::vector<Tensor>& in) {
         Tensor t = permute(transpose(reshape(in[0], {6, 4}), 0, 1), {1, 0});
         return contiguous(mul(t, t));
       }});
  register_op_case({"views/narrow_unsqueeze_expand",
                    {normal({4, 5}), normal({4, 3})},
                    [](const std::vector<Tensor>& in) {
                      Tensor t = expand(unsqueeze(narrow(in[0], 1, 1, 3), 0), {2, 4, 3});
                      return mul(t, squeeze(unsqueeze(in[1], 0), 0));
                    }});
  register_op_case({"views/split", {normal({3, 10})}, [](const std::vector<Tensor>& in) {
                      std::vector<Tensor> parts = split(in[0], {2, 5, 3}, 1);
                      // The middle piece gets no gradient: split must fill it with zeros.
                      return add(mul(parts[0], parts[0]), narrow(parts[2], 1, 0, 2));
                    }});
}

}  // namespace headroom::testing

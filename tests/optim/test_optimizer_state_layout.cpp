// optimizer_state_layout: what each optimizer says it keeps for a parameter is what its first
// step allocates (its state_dict's tensors: names, shapes, dtypes), so the planner's formulas can
// ask the optimizer instead of re-encoding its layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "optim/optimizer_factory.h"

namespace headroom {
namespace {

using Entry = std::tuple<std::string, std::vector<int64_t>, DType>;

std::vector<int64_t> dims(const Shape& shape) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < shape.ndim(); ++i) out.push_back(shape[i]);
  return out;
}

// The state tensors of the one parameter after a step, by key ("exp_avg", not "state.0.0.exp_avg").
std::vector<Entry> allocated(const OptimizerArguments& args, const Shape& shape, DType dtype) {
  Tensor param = Tensor::zeros(shape, dtype).set_requires_grad(true);
  const std::unique_ptr<Optimizer> optimizer = make_optimizer(args, {{"w", param}});
  param.set_grad(Tensor::full(shape, 0.5f, dtype));
  optimizer->step();
  std::vector<Entry> out;
  for (const auto& [name, tensor] : optimizer->state_dict().tensors) {
    out.emplace_back(name.substr(name.rfind('.') + 1), dims(tensor.shape()), tensor.dtype());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Entry> described(const OptimizerArguments& args, const Shape& shape, DType dtype) {
  std::vector<Entry> out;
  for (const StateTensor& state : optimizer_state_layout(args, shape, dtype)) {
    out.emplace_back(state.name, dims(state.shape), state.dtype);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(OptimizerStateLayout, IsWhatTheFirstStepAllocates) {
  struct Case {
    std::string optim, optim_args;
    bool kahan = false;
  };
  const std::vector<Case> cases = {{"adamw_torch", ""},
                                   {"adamw_bf16", ""},
                                   {"adamw_8bit", ""},
                                   {"adamw_bnb_8bit", ""},
                                   {"sgd", ""},
                                   {"sgd", "momentum=0.9"},
                                   {"lion", ""},
                                   {"lion_32bit", ""},
                                   {"lion_8bit", ""},
                                   {"adafactor", ""},
                                   {"adafactor", "beta1=0.9"},
                                   {"adamw_torch", "", true}};
  // Below and above bitsandbytes' min_8bit_size (4096), a vector, and a 3-d tensor (Adafactor
  // factors its last two dimensions).
  const std::vector<Shape> shapes = {{80, 64}, {16, 8}, {300}, {2, 5, 7}};
  for (const Case& c : cases) {
    OptimizerArguments args;
    args.optim = c.optim;
    args.optim_args = c.optim_args;
    args.kahan_summation = c.kahan;
    for (const DType dtype : {DType::f32, DType::bf16}) {
      for (const Shape& shape : shapes) {
        SCOPED_TRACE(c.optim + " " + c.optim_args + (c.kahan ? " kahan " : " ") +
                     dtype_name(dtype) + " " + shape.str());
        EXPECT_EQ(described(args, shape, dtype), allocated(args, shape, dtype));
        int64_t bytes = 0;
        for (const StateTensor& s : optimizer_state_layout(args, shape, dtype)) bytes += s.bytes();
        int64_t expected = 0;
        for (const auto& [name, d, t] : allocated(args, shape, dtype)) {
          expected += Shape(d).numel() * static_cast<int64_t>(dtype_size(t));
        }
        EXPECT_EQ(bytes, expected);
      }
    }
  }
}

TEST(OptimizerStateLayout, LomoKeepsNone) {
  OptimizerArguments args;
  args.optim = "lomo";
  EXPECT_TRUE(optimizer_state_layout(args, Shape{8, 8}, DType::f32).empty());
  EXPECT_TRUE(updates_in_backward(parse_optimizer_kind("lomo")));
  EXPECT_FALSE(updates_in_backward(parse_optimizer_kind("adamw_torch")));
}

TEST(OptimizerStateLayout, NamesAndKinds) {
  EXPECT_EQ(parse_optimizer_kind("adamw_torch_fused"), OptimizerKind::adamw);
  EXPECT_EQ(parse_optimizer_kind("adamw_bnb_8bit"), OptimizerKind::adamw_8bit);
  EXPECT_EQ(parse_optimizer_kind("lion_32bit"), OptimizerKind::lion);
  for (const std::string& name : optimizer_names()) {
    // Every listed name's kind spells back to a listed name of the same kind.
    const OptimizerKind kind = parse_optimizer_kind(name);
    EXPECT_EQ(parse_optimizer_kind(optimizer_kind_name(kind)), kind) << name;
  }
  EXPECT_THROW(parse_optimizer_kind("adam_9bit"), ValueError);
}

}  // namespace
}  // namespace headroom

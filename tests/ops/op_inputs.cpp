// The op harness's registry and inputs, apart from its CPU checks so that the CUDA test program
// runs the same cases on the same values (tests/cuda/test_cuda_op_harness.cpp).
#include <algorithm>
#include <cctype>

#include "core/generator.h"
#include "ops/op_harness.h"

namespace headroom::testing {

namespace {

std::vector<OpCase>& registry() {
  static std::vector<OpCase> cases;
  return cases;
}

}  // namespace

void register_op_case(OpCase op_case) { registry().push_back(std::move(op_case)); }
const std::vector<OpCase>& op_cases() { return registry(); }

std::string op_case_test_name(size_t index) {
  std::string name = op_cases()[index].name;
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

std::vector<Tensor> make_op_inputs(const OpCase& c, uint64_t seed, DType dtype, Device device,
                                   bool requires_grad) {
  Generator gen(seed);
  std::vector<Tensor> inputs;
  for (const OpInput& in : c.inputs) {
    Tensor t;
    if (in.kind == OpInput::Kind::ids) {
      const Tensor u = Tensor::rand(in.shape, DType::f32, kCPU, &gen);
      const Tensor drop = Tensor::rand(in.shape, DType::f32, kCPU, &gen);
      std::vector<float> uf = u.to_float_vector(), df = drop.to_float_vector();
      std::vector<int64_t> v(uf.size());
      for (size_t i = 0; i < v.size(); ++i) {
        v[i] = std::min<int64_t>(in.id_limit - 1, static_cast<int64_t>(uf[i] * in.id_limit));
        if (df[i] < in.ignored_fraction) v[i] = -100;
      }
      t = Tensor::from_ints(v, in.shape, DType::i64, kCPU);
    } else if (in.kind == OpInput::Kind::normal) {
      t = Tensor::randn(in.shape, DType::f32, kCPU, &gen);
      std::vector<float> v = t.to_float_vector();
      for (float& x : v) x = static_cast<float>(x * in.scale);
      t = Tensor::from_floats(v, in.shape, DType::f32, kCPU);
    } else {
      t = Tensor::rand(in.shape, DType::f32, kCPU, &gen);
      std::vector<float> v = t.to_float_vector();
      for (float& x : v) x = static_cast<float>((0.5f + x) * in.scale);
      t = Tensor::from_floats(v, in.shape, DType::f32, kCPU);
    }
    if (is_float_input(in) && dtype != DType::f32) t = t.to(dtype);
    if (device != kCPU) t = t.to(device);
    if (requires_grad && is_float_input(in) && in.differentiable) t.set_requires_grad(true);
    inputs.push_back(t);
  }
  return inputs;
}

}  // namespace headroom::testing

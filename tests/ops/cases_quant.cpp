// Harness cases for the 4-bit linear (quant/linear_4bit.h): x and bias get finite-difference
// gradients while the NF4 / FP4 weight, quantized from a fixed seed on x's device, stays frozen.
#include <map>
#include <tuple>

#include "core/generator.h"
#include "ops/op_harness.h"
#include "quant/linear_4bit.h"

namespace headroom::testing {

namespace {

// Made once per case and device (in the harness's probe call, before it measures), as a model's
// frozen base exists before its step runs.
const Quant4bitWeight& frozen_weight(Quant4bitType type, bool nested, int64_t out, int64_t in,
                                     Device device) {
  static std::map<std::tuple<int, bool, int64_t, int64_t, int, int>, Quant4bitWeight> cache;
  const auto key = std::make_tuple(static_cast<int>(type), nested, out, in,
                                   static_cast<int>(device.type), device.index);
  auto it = cache.find(key);
  if (it == cache.end()) {
    Generator g(21);
    Quant4bitConfig config;
    config.quant_type = type;
    config.double_quant = nested;
    const Tensor w = Tensor::randn({out, in}, DType::f32, kCPU, &g);
    it = cache.emplace(key, quantize_4bit(w.to(device), config)).first;
  }
  return it->second;
}

}  // namespace

HEADROOM_OP_CASES(quant_cases) {
  register_op_case({"linear_4bit/nf4_double_quant_bias",
                    {normal({2, 3, 40}), normal({6})},
                    [](const std::vector<Tensor>& in) {
                      const Quant4bitWeight& w =
                          frozen_weight(Quant4bitType::nf4, true, 6, 40, in[0].device());
                      return linear_4bit(in[0], w, in[1], DType::f32);
                    }});
  register_op_case(
      {"linear_4bit/fp4_no_bias", {normal({5, 24})}, [](const std::vector<Tensor>& in) {
         const Quant4bitWeight& w = frozen_weight(Quant4bitType::fp4, false, 7, 24, in[0].device());
         return linear_4bit(in[0], w, Tensor(), DType::f32);
       }});
}

}  // namespace headroom::testing

// One harness for every op: each case names its inputs and a function; the harness checks
// gradients by finite differences, that the meta device infers the same shapes and allocates the
// same bytes as the CPU, that bf16 / f16 inputs give the fp32 result rounded once, and that runs
// repeat bit for bit. A later backend is tested by adding it here (see Note in op_harness.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace headroom::testing {

struct OpInput {
  enum class Kind { normal, positive, ids };
  Shape shape;
  Kind kind = Kind::normal;
  // normal: N(0, scale^2); positive: uniform(0.5, 1.5) * scale; ids: integers in [0, id_limit)
  double scale = 1.0;
  int64_t id_limit = 0;
  // ids only: this fraction of entries set to -100 (an ignore_index).
  double ignored_fraction = 0.0;
  // Floating inputs take part in the gradient check unless this is false.
  bool differentiable = true;
};

inline OpInput normal(Shape shape, double scale = 1.0) {
  return {shape, OpInput::Kind::normal, scale};
}
inline OpInput positive(Shape shape) { return {shape, OpInput::Kind::positive}; }
inline OpInput ids(Shape shape, int64_t limit, double ignored_fraction = 0.0) {
  OpInput in{shape, OpInput::Kind::ids};
  in.id_limit = limit;
  in.ignored_fraction = ignored_fraction;
  in.differentiable = false;
  return in;
}

struct OpCase {
  std::string name;  // "gelu/2x3x5": op, then what distinguishes the case
  std::vector<OpInput> inputs;
  // Must be a pure function of its inputs (seed any randomness inside it).
  std::function<Tensor(const std::vector<Tensor>&)> fn;
  double fd_eps = 1e-3;
  double grad_rtol = 1e-2;
  double grad_atol = 1e-4;
  // Low-precision dtypes whose forward is checked against fp32 (empty: none).
  std::vector<DType> low_precision = {DType::bf16, DType::f16};
  // Extra relative tolerance for ops whose low-precision path rounds intermediates.
  double low_precision_rtol = 0.0;
  // Kernels that round an intermediate the fp32 reference keeps (attention rounds P to the
  // dtype before P V on a GPU, as FlashAttention; a residual norm rounds its sum, as add does,
  // on every device): an extra bound of this many unit roundoffs of the dtype times the
  // result's largest magnitude (Note [CUDA op tolerances]).
  double rounded_intermediate_units = 0.0;
  // GPU kernels that accumulate in fewer bits than fp32 (Hopper's FP8 tensor cores, about 14:
  // DeepSeek-V3, section 3.3.2): an extra bound, as a fraction of the largest magnitude, in
  // every dtype.
  double gpu_accumulation_atol_fraction = 0.0;
  // Gradients that are 0 in exact arithmetic and rounding noise on both devices (attention with
  // a window of one key): an absolute bound for the GPU's against the CPU's.
  double gpu_gradient_atol = 0.0;
};

void register_op_case(OpCase op_case);
const std::vector<OpCase>& op_cases();

inline bool is_float_input(const OpInput& in) { return in.kind != OpInput::Kind::ids; }

// The inputs of `c` drawn from `seed`: floating ones drawn in fp32 and rounded to `dtype`, ids
// as i64, then moved to `device`; floating differentiable ones require grad when asked. A seed
// gives the same values on every device.
std::vector<Tensor> make_op_inputs(const OpCase& c, uint64_t seed, DType dtype, Device device,
                                   bool requires_grad);

// The gtest name of case `index`: its name with each character other than [A-Za-z0-9] as '_'.
std::string op_case_test_name(size_t index);

}  // namespace headroom::testing

// Registers cases at static-initialisation time: HEADROOM_OP_CASES(gelu_cases) { register... }
#define HEADROOM_OP_CASES(name)                                          \
  static void name();                                                    \
  [[maybe_unused]] static const bool name##_registered = (name(), true); \
  static void name()

// The registry of the `quantization` family's kernel tables (backend/quantization_kernels.h).
#include "backend/quantization_kernels.h"

#include <algorithm>
#include <array>

#include "core/error.h"

namespace headroom {
namespace {

struct Tables {
  std::array<QuantizationKernels, kNumDeviceTypes> kernels{};
  std::array<bool, kNumDeviceTypes> registered{};
};

Tables& tables() {
  static Tables t;
  return t;
}

}  // namespace

int64_t linear_4bit_forward_workspace(int64_t rows, int64_t in, int64_t out) {
  const int64_t r = std::min(rows, kLinear4bitRowTile), t = std::min(out, kLinear4bitWeightTile);
  return t * in + r * in + r * t;
}

int64_t linear_4bit_backward_workspace(int64_t rows, int64_t in, int64_t out) {
  const int64_t r = std::min(rows, kLinear4bitRowTile), t = std::min(in, kLinear4bitWeightTile);
  return out * t + r * out + r * t;
}

QuantizationKernels& mutable_quantization_kernels(DeviceType type) {
  Tables& t = tables();
  t.registered[static_cast<size_t>(type)] = true;
  return t.kernels[static_cast<size_t>(type)];
}

const QuantizationKernels* find_quantization_kernels(DeviceType type) {
  const Tables& t = tables();
  const size_t i = static_cast<size_t>(type);
  return t.registered[i] ? &t.kernels[i] : nullptr;
}

void throw_missing_quantization_kernel(const char* name, const char* op, Device device) {
  throw NotImplementedError(str_cat(op, ": the quantization kernel ", name,
                                    " is not implemented for ", device));
}

}  // namespace headroom

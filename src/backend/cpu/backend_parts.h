// The parts of the CPU backend that backend/cpu/backend.cpp registers together: the Tensor kernels
// and the fill functions of the op kernel tables (Note [Kernel tables]).
#pragma once

#include "backend/backend.h"
#include "core/device_kernels.h"

namespace headroom::cpu {

const DeviceKernels& tensor_kernels();

void fill_quantization_kernels(QuantizationKernels& kernels);  // linear_4bit.cpp

}  // namespace headroom::cpu

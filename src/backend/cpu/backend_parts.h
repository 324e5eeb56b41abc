// The parts of the CPU backend that backend/cpu/backend.cpp registers together: the Tensor kernels
// and the fill functions of the op kernel tables (Note [Kernel tables]).
#pragma once

#include "backend/backend.h"
#include "core/device_kernels.h"

namespace headroom::cpu {

const DeviceKernels& tensor_kernels();

void fill_activation_kernels(ActivationKernels& kernels);  // activation.cpp
void fill_cross_entropy_kernels(CrossEntropyKernels& kernels);  // cross_entropy.cpp
void fill_dropout_kernels(DropoutKernels& kernels);        // dropout.cpp
void fill_gemm_kernels(GemmKernels& kernels);              // gemm.cpp
void fill_norm_kernels(NormKernels& kernels);              // norm.cpp
void fill_quantization_kernels(QuantizationKernels& kernels);  // linear_4bit.cpp
void fill_rotary_kernels(RotaryKernels& kernels);          // rotary.cpp
void fill_softmax_kernels(SoftmaxKernels& kernels);        // softmax.cpp

}  // namespace headroom::cpu

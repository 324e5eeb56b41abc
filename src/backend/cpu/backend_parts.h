// The parts of the CPU backend that backend/cpu/backend.cpp registers together: the Tensor kernels
// and the fill functions of the op kernel tables (Note [Kernel tables]).
#pragma once

#include "backend/backend.h"
#include "core/device_kernels.h"

namespace headroom::cpu {

const DeviceKernels& tensor_kernels();

void fill_activation_kernels(ActivationKernels& kernels);  // activation.cpp
void fill_adafactor_kernels(AdafactorKernels& kernels);    // adafactor.cpp
void fill_adamw_kernels(AdamWKernels& kernels);            // adamw.cpp
void fill_adamw_8bit_kernels(AdamW8bitKernels& kernels);   // adamw_8bit.cpp
void fill_dropout_kernels(DropoutKernels& kernels);        // dropout.cpp
// norm_partial and norm_combine only, for LOMO; clip_grad_norm_ and the GradScaler still run
// their CPU loops (backend/cpu/clip_grad.h, grad_scaler.h).
void fill_grad_check_kernels(GradCheckKernels& kernels);   // grad_check.cpp
void fill_lion_kernels(LionKernels& kernels);              // lion.cpp
void fill_lomo_kernels(LomoKernels& kernels);              // lomo.cpp
void fill_norm_kernels(NormKernels& kernels);              // norm.cpp
void fill_quantization_kernels(QuantizationKernels& kernels);  // linear_4bit.cpp
void fill_rotary_kernels(RotaryKernels& kernels);          // rotary.cpp
void fill_sgd_kernels(SgdKernels& kernels);                // sgd.cpp
void fill_softmax_kernels(SoftmaxKernels& kernels);        // softmax.cpp

}  // namespace headroom::cpu

// The parts of the CPU backend that backend/cpu/backend.cpp registers together: the Tensor kernels
// and the fill functions of the op kernel tables (Note [Kernel tables]).
#pragma once

#include "backend/backend.h"
#include "core/device_kernels.h"

namespace headroom::cpu {

const DeviceKernels& tensor_kernels();

void fill_activation_kernels(ActivationKernels& kernels);          // activation.cpp
void fill_adafactor_kernels(AdafactorKernels& kernels);            // adafactor.cpp
void fill_adamw_8bit_kernels(AdamW8bitKernels& kernels);           // adamw_8bit.cpp
void fill_adamw_kernels(AdamWKernels& kernels);                    // adamw.cpp
void fill_attention_kernels(AttentionKernels& kernels);            // attention.cpp
void fill_cross_entropy_kernels(CrossEntropyKernels& kernels);     // cross_entropy.cpp
void fill_dropout_kernels(DropoutKernels& kernels);                // dropout.cpp
void fill_elementwise_kernels(ElementwiseKernels& kernels);        // elementwise.cpp
void fill_embedding_kernels(EmbeddingKernels& kernels);            // embedding.cpp
void fill_fp8_kernels(Fp8Kernels& kernels);                        // fp8.cpp
void fill_gemm_kernels(GemmKernels& kernels);                      // gemm.cpp
void fill_grad_check_kernels(GradCheckKernels& kernels);           // grad_checks.cpp
void fill_lion_kernels(LionKernels& kernels);                      // lion.cpp
void fill_lion_8bit_kernels(Lion8bitKernels& kernels);             // lion_8bit.cpp
void fill_lomo_kernels(LomoKernels& kernels);                      // lomo.cpp
void fill_norm_kernels(NormKernels& kernels);                      // norm.cpp
void fill_quantization_kernels(QuantizationKernels& kernels);      // linear_4bit.cpp
void fill_quant_4bit_codec_kernels(QuantizationKernels& kernels);  // quant_4bit_codec.cpp
void fill_reduction_kernels(ReductionKernels& kernels);            // reduction.cpp
void fill_rotary_kernels(RotaryKernels& kernels);                  // rotary.cpp
void fill_sgd_kernels(SgdKernels& kernels);                        // sgd.cpp
void fill_softmax_kernels(SoftmaxKernels& kernels);                // softmax.cpp

}  // namespace headroom::cpu

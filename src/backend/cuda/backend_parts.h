// The parts of the CUDA backend that backend/cuda/backend.cpp registers together: raw GPU memory,
// the Tensor kernels, and a fill function per op family, each defined in that family's kernel
// file (Note [Kernel tables] in backend/kernel_table.h). Host code only: no CUDA header here.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "core/device_kernels.h"
#include "memory/device_allocator.h"

namespace headroom::cuda {

std::unique_ptr<DeviceAllocator> make_device_allocator(int index);  // cuda_device_allocator.cpp
const DeviceKernels& tensor_kernels();                              // tensor_kernels.cu
// The profiler's timing of this device's kernels (core/device_activity.h).
std::shared_ptr<DeviceActivitySource> make_kernel_timer(int index);  // kernel_timer.cpp

void fill_gemm_kernels(GemmKernels& kernels);                   // gemm.cpp
void fill_activation_kernels(ActivationKernels& kernels);       // activation.cu
void fill_elementwise_kernels(ElementwiseKernels& kernels);     // elementwise.cu
void fill_dropout_kernels(DropoutKernels& kernels);             // dropout.cu
void fill_rotary_kernels(RotaryKernels& kernels);               // rotary.cu
void fill_reduction_kernels(ReductionKernels& kernels);         // reduction.cu
void fill_softmax_kernels(SoftmaxKernels& kernels);             // softmax.cu
void fill_norm_kernels(NormKernels& kernels);                   // norm.cu
void fill_attention_kernels(AttentionKernels& kernels);         // attention.cu
void fill_embedding_kernels(EmbeddingKernels& kernels);         // embedding.cu
void fill_cross_entropy_kernels(CrossEntropyKernels& kernels);  // cross_entropy.cu
void fill_grad_check_kernels(GradCheckKernels& kernels);        // grad_checks.cu
void fill_adamw_kernels(AdamWKernels& kernels);                 // adamw.cu
void fill_adamw_8bit_kernels(AdamW8bitKernels& kernels);        // adamw_8bit.cu
void fill_lion_kernels(LionKernels& kernels);                   // lion.cu
void fill_lion_8bit_kernels(Lion8bitKernels& kernels);          // lion_8bit.cu
void fill_sgd_kernels(SgdKernels& kernels);                     // sgd.cu
void fill_adafactor_kernels(AdafactorKernels& kernels);         // adafactor.cu
void fill_lomo_kernels(LomoKernels& kernels);                   // lomo.cu
void fill_quantization_kernels(QuantizationKernels& kernels);   // quantization.cu
void fill_fp8_kernels(Fp8Kernels& kernels);                     // fp8.cu

// The reduction table's sum_middle, called by gemm's unfused bias gradient inside its own
// kernel-table call (the CPU's gemm calls its column sums directly too: one call in the census).
void sum_middle(const Tensor& x, int64_t outer, int64_t n, int64_t inner, double factor,
                const Tensor& out);  // reduction.cu

}  // namespace headroom::cuda

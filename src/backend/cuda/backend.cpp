// Registers the CUDA backend: raw GPU memory, its Tensor kernels, its op kernel tables and the
// profiler's timing of its kernels, together (backend/backend.h).
#include "backend/cuda/backend_parts.h"

namespace headroom::cuda {
namespace {

const bool kRegistered = [] {
  Backend backend{DeviceType::cuda};
  backend.allocator = make_device_allocator;
  backend.tensor_kernels = &tensor_kernels();
  backend.activity_source = make_kernel_timer;
  KernelTables& k = backend.kernels;
  fill_gemm_kernels(std::get<GemmKernels>(k));
  fill_activation_kernels(std::get<ActivationKernels>(k));
  fill_elementwise_kernels(std::get<ElementwiseKernels>(k));
  fill_dropout_kernels(std::get<DropoutKernels>(k));
  fill_rotary_kernels(std::get<RotaryKernels>(k));
  fill_reduction_kernels(std::get<ReductionKernels>(k));
  fill_softmax_kernels(std::get<SoftmaxKernels>(k));
  fill_norm_kernels(std::get<NormKernels>(k));
  fill_attention_kernels(std::get<AttentionKernels>(k));
  fill_embedding_kernels(std::get<EmbeddingKernels>(k));
  fill_cross_entropy_kernels(std::get<CrossEntropyKernels>(k));
  fill_grad_check_kernels(std::get<GradCheckKernels>(k));
  fill_adamw_kernels(std::get<AdamWKernels>(k));
  fill_adamw_8bit_kernels(std::get<AdamW8bitKernels>(k));
  fill_lion_kernels(std::get<LionKernels>(k));
  fill_lion_8bit_kernels(std::get<Lion8bitKernels>(k));
  fill_sgd_kernels(std::get<SgdKernels>(k));
  fill_adafactor_kernels(std::get<AdafactorKernels>(k));
  fill_lomo_kernels(std::get<LomoKernels>(k));
  fill_quantization_kernels(std::get<QuantizationKernels>(k));
  fill_fp8_kernels(std::get<Fp8Kernels>(k));
  register_backend(backend);
  return true;
}();

}  // namespace
}  // namespace headroom::cuda

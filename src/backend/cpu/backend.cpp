// Registers the CPU backend: its memory, its Tensor kernels and its op kernel tables, together.
#include "backend/cpu/backend_parts.h"
#include "core/error.h"
#include "memory/device_allocator.h"

namespace headroom::cpu {
namespace {

std::unique_ptr<DeviceAllocator> make_allocator(int index) {
  if (index != 0) throw ValueError(str_cat("device cpu:", index, " does not exist; use cpu"));
  return make_cpu_device_allocator();
}

const bool kRegistered = [] {
  Backend backend{DeviceType::cpu};
  backend.allocator = make_allocator;
  backend.tensor_kernels = &tensor_kernels();
  fill_activation_kernels(std::get<ActivationKernels>(backend.kernels));
  fill_adafactor_kernels(std::get<AdafactorKernels>(backend.kernels));
  fill_adamw_8bit_kernels(std::get<AdamW8bitKernels>(backend.kernels));
  fill_adamw_kernels(std::get<AdamWKernels>(backend.kernels));
  fill_attention_kernels(std::get<AttentionKernels>(backend.kernels));
  fill_cross_entropy_kernels(std::get<CrossEntropyKernels>(backend.kernels));
  fill_dropout_kernels(std::get<DropoutKernels>(backend.kernels));
  fill_elementwise_kernels(std::get<ElementwiseKernels>(backend.kernels));
  fill_embedding_kernels(std::get<EmbeddingKernels>(backend.kernels));
  fill_fp8_kernels(std::get<Fp8Kernels>(backend.kernels));
  fill_gemm_kernels(std::get<GemmKernels>(backend.kernels));
  fill_grad_check_kernels(std::get<GradCheckKernels>(backend.kernels));
  fill_lion_kernels(std::get<LionKernels>(backend.kernels));
  fill_lion_8bit_kernels(std::get<Lion8bitKernels>(backend.kernels));
  fill_lomo_kernels(std::get<LomoKernels>(backend.kernels));
  fill_norm_kernels(std::get<NormKernels>(backend.kernels));
  fill_quantization_kernels(std::get<QuantizationKernels>(backend.kernels));
  fill_reduction_kernels(std::get<ReductionKernels>(backend.kernels));
  fill_rotary_kernels(std::get<RotaryKernels>(backend.kernels));
  fill_sgd_kernels(std::get<SgdKernels>(backend.kernels));
  fill_softmax_kernels(std::get<SoftmaxKernels>(backend.kernels));
  register_backend(backend);
  return true;
}();

}  // namespace
}  // namespace headroom::cpu

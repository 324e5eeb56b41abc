// A device backend as the rest of the engine sees it: raw memory (its DeviceAllocator), the Tensor
// class's kernels (core/device_kernels.h), one op kernel table per family (Note [Kernel tables]
// in backend/kernel_table.h) and optionally a profiler's timing of its kernels
// (core/device_activity.h), registered once, together, at start-up.
#pragma once

#include <string>
#include <tuple>
#include <vector>

#include "backend/activation_kernels.h"
#include "backend/adafactor_kernels.h"
#include "backend/adamw_8bit_kernels.h"
#include "backend/adamw_kernels.h"
#include "backend/attention_kernels.h"
#include "backend/cross_entropy_kernels.h"
#include "backend/dropout_kernels.h"
#include "backend/elementwise_kernels.h"
#include "backend/embedding_kernels.h"
#include "backend/fp8_kernels.h"
#include "backend/gemm_kernels.h"
#include "backend/grad_check_kernels.h"
#include "backend/kernel_table.h"
#include "backend/lion_8bit_kernels.h"
#include "backend/lion_kernels.h"
#include "backend/lomo_kernels.h"
#include "backend/norm_kernels.h"
#include "backend/quantization_kernels.h"
#include "backend/reduction_kernels.h"
#include "backend/rotary_kernels.h"
#include "backend/sgd_kernels.h"
#include "backend/softmax_kernels.h"
#include "core/device.h"
#include "core/device_activity.h"
#include "core/device_kernels.h"
#include "memory/device_memory.h"

namespace headroom {

// Every family's table of one device; a family is found by its type (std::get<NormKernels>).
using KernelTables =
    std::tuple<GemmKernels, ActivationKernels, ElementwiseKernels, ReductionKernels, SoftmaxKernels,
               NormKernels, AttentionKernels, EmbeddingKernels, CrossEntropyKernels, RotaryKernels,
               DropoutKernels, AdamWKernels, AdamW8bitKernels, LionKernels, Lion8bitKernels,
               SgdKernels, AdafactorKernels, LomoKernels, GradCheckKernels, QuantizationKernels,
               Fp8Kernels>;

struct Backend {
  DeviceType type;
  // Raw memory of the device; null keeps the memory layer's own (cpu and meta have one there).
  DeviceAllocatorFactory allocator = nullptr;
  const DeviceKernels* tensor_kernels = nullptr;
  KernelTables kernels{};
  // (optional) Times the device's kernels for the profiler (Note [CUDA time in the profiler] in
  // profile/profiler.h); without it a profile shows no device time for the device.
  DeviceActivitySourceFactory activity_source = nullptr;
};

// Registers the backend's allocator, tensor kernels and kernel tables (at static initialisation);
// one backend per device type.
void register_backend(const Backend& backend);

// The kernel tables of `type`, or null when no backend registered it.
const KernelTables* find_kernel_tables(DeviceType type);

// The meta device's tables: every entry of every family a no-op (Note [Kernel tables]).
KernelTables noop_kernel_tables();

// "family.entry" for each required entry without a kernel; empty when every op has one.
std::vector<std::string> missing_kernels(const KernelTables& tables);

}  // namespace headroom

// The optimizers, gradient clipping and the GradScaler on the meta device, which allocates as
// CUDA does (one code path, Note [Kernel tables]): the buffers of the native paths, to the byte,
// and no fp32 copies of bf16 parameters or gradients.
#include <gtest/gtest.h>

#include "amp/grad_scaler.h"
#include "autograd/engine.h"
#include "backend/adafactor_kernels.h"
#include "backend/grad_check_kernels.h"
#include "core/tensor.h"
#include "memory/device_memory.h"
#include "ops/elementwise.h"
#include "ops/op_support.h"
#include "ops/reduction.h"
#include "optim/adafactor.h"
#include "optim/adamw.h"
#include "optim/clip_grad.h"
#include "optim/lion.h"
#include "optim/lomo.h"
#include "optim/sgd.h"

namespace headroom {
namespace {

const Device kMetaDevice{DeviceType::meta, 0};

// Bytes the caching allocator charges for a request (multiples of 512).
int64_t charged(int64_t bytes) { return (bytes + 511) / 512 * 512; }

// A meta parameter with a gradient of `grad_dtype`.
Tensor meta_param(const Shape& shape, DType dtype, DType grad_dtype) {
  Tensor param = Tensor::empty(shape, dtype, kMetaDevice);
  param.set_requires_grad(true);
  param.set_grad(Tensor::empty(shape, grad_dtype, kMetaDevice));
  return param;
}

// How far peak allocated bytes on meta rise above the current level while `fn` runs.
template <typename Fn>
int64_t peak_growth(Fn fn) {
  const int64_t before = static_cast<int64_t>(memory_allocated(kMetaDevice));
  reset_peak_memory_stats(kMetaDevice);
  fn();
  return static_cast<int64_t>(max_memory_allocated(kMetaDevice)) - before;
}

TEST(OptimNativePlan, AdamWAllocatesOnlyItsStates) {
  const Tensor param = meta_param({1000, 3}, DType::bf16, DType::bf16);
  AdamW adamw({param}, {.state_dtype = DType::bf16, .kahan_summation = true});
  // exp_avg, exp_avg_sq and the Kahan buffer, all bf16: no fp32 copy of the parameter or grad.
  EXPECT_EQ(peak_growth([&] { adamw.step(); }), 3 * charged(3000 * 2));
  EXPECT_EQ(adamw.state(0, 0).exp_avg.dtype(), DType::bf16);
  EXPECT_EQ(adamw.state(0, 0).compensation.dtype(), DType::bf16);
  EXPECT_EQ(peak_growth([&] { adamw.step(); }), 0);
}

TEST(OptimNativePlan, LionAndSgdAllocateNoCopies) {
  const Tensor param = meta_param({777}, DType::bf16, DType::bf16);
  Lion lion({param});
  EXPECT_EQ(peak_growth([&] { lion.step(); }), charged(777 * 4));  // exp_avg f32
  EXPECT_EQ(peak_growth([&] { lion.step(); }), 0);
  SGD sgd({param}, {.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(peak_growth([&] { sgd.step(); }), charged(777 * 4));  // momentum_buffer f32
  EXPECT_EQ(peak_growth([&] { sgd.step(); }), 0);
}

TEST(OptimNativePlan, AdafactorAllocatesItsWorkspaceNotCopies) {
  const Tensor matrix = meta_param({2, 30, 50}, DType::bf16, DType::bf16);
  const Tensor vector = meta_param({70}, DType::f32, DType::f32);
  Adafactor adafactor({matrix, vector});
  const int64_t scalars = adafactor_scalars(2) * 8;
  const int64_t states = charged(2 * 30 * 4) + charged(2 * 50 * 4) + charged(70 * 4);
  // Per parameter: the scalars, which stay alive as rms_lr until its next step, and for the
  // matrix col_factor [2, 50] f32, freed before the vector's step; the peak is at the end.
  EXPECT_EQ(peak_growth([&] { adafactor.step(); }),
            states + charged(scalars) + charged(adafactor_scalars(1) * 8));
  // Later steps replace the scalars; col_factor is the only other buffer.
  EXPECT_EQ(peak_growth([&] { adafactor.step(); }), charged(2 * 50 * 4) + charged(scalars));
  EXPECT_TRUE(adafactor.state(0, 0).rms_lr.defined());
}

TEST(OptimNativePlan, ClipGradNormAllocatesPartialsAndResult) {
  const Tensor a = meta_param({100}, DType::bf16, DType::bf16);
  const Tensor b = meta_param({7, 9}, DType::f32, DType::f16);
  const int64_t partials = charged(2 * kNormPartialBlocks * 8);
  {
    double total = -1.0;
    EXPECT_EQ(peak_growth([&] {
                total = clip_grad_norm_({a, b}, 1.0);
              }),
              partials + charged(2 * 4));
    EXPECT_EQ(total, 0.0);  // nothing computed on meta
    EXPECT_EQ(peak_growth([&] { total = grad_norm({a, b}); }), partials + charged(2 * 4));
    EXPECT_EQ(a.grad().dtype(), DType::bf16);
  }
  // One pattern: the dry run standing in for the CPU plans the same buffers.
  EXPECT_EQ(peak_growth([&] { clip_grad_norm_({a, b}, 1.0); }), partials + charged(2 * 4));
}

TEST(OptimNativePlan, GradScalerUsesOneFlagPerStep) {
  const Tensor a = meta_param({100}, DType::f32, DType::bf16);
  const Tensor b = meta_param({300}, DType::f32, DType::f32);
  SGD sgd({a, b}, {.lr = 0.1});
  GradScaler scaler;
  scaler.scale(Tensor::ones({}, DType::f32, kMetaDevice));
  EXPECT_EQ(peak_growth([&] { scaler.unscale_(sgd); }), charged(4));  // one f32 flag
  EXPECT_FALSE(scaler.found_inf(sgd));
  EXPECT_TRUE(scaler.step(sgd));
  scaler.update();
}

TEST(OptimNativePlan, LomoMeasuresIntoDevicePartials) {
  Tensor a = Tensor::empty({100}, DType::bf16, kMetaDevice);
  Tensor b = Tensor::empty({40}, DType::f32, kMetaDevice);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  Lomo lomo({a, b}, {.clip_grad_norm = 1.0});
  lomo.begin_backward_pass(0);
  const int64_t before = static_cast<int64_t>(memory_allocated(kMetaDevice));
  backward(add(sum(a), sum(b)), Tensor(), /*retain_graph=*/true);
  EXPECT_FALSE(a.grad().defined());  // measured and dropped
  // The partial norms of both parameters, one row each, live until pass 1 combines them.
  EXPECT_EQ(static_cast<int64_t>(memory_allocated(kMetaDevice)) - before,
            charged(2 * kNormPartialBlocks * 8));
  // Combining allocates the f32 [2] result before the partials go.
  EXPECT_EQ(peak_growth([&] { lomo.begin_backward_pass(1); }), charged(2 * 4));
  backward(add(sum(a), sum(b)));
  lomo.step();
  EXPECT_EQ(lomo.grad_norm(), 0.0);  // nothing computed on meta
}

}  // namespace
}  // namespace headroom

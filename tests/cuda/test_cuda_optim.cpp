// The fused optimizer updates, clip_grad_norm_ / grad_norm and the GradScaler on the GPU against
// the CPU reference, for f32 / bf16 / f16 parameters and gradients, odd sizes, sizes above one
// block and a large case; and each first step's allocations against a meta dry run. Skipped without
// a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "amp/grad_scaler.h"
#include "cuda/cuda_test_support.h"
#include "autograd/engine.h"
#include "core/generator.h"
#include "core/tensor.h"
#include "memory/device_memory.h"
#include "ops/elementwise.h"
#include "ops/op_support.h"
#include "ops/reduction.h"
#include "optim/adafactor.h"
#include "optim/adamw.h"
#include "optim/adamw_8bit.h"
#include "optim/clip_grad.h"
#include "optim/lion.h"
#include "optim/lion_8bit.h"
#include "optim/lomo.h"
#include "optim/sgd.h"

namespace headroom {
namespace {

const Device kMetaDevice{DeviceType::meta, 0};

// Relative tolerance of a parameter of `dtype` after a few steps (one rounding of the dtype,
// and a few fp32 ulps where an order of operations differs).
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return 1e-2;
    case DType::f16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

void expect_close(const Tensor& cpu, const Tensor& gpu, double rtol, const std::string& what) {
  const std::vector<float> a = cpu.to(DType::f32).to_float_vector();
  const std::vector<float> b = gpu.to(kCPU).to(DType::f32).to_float_vector();
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double tol = rtol * std::max(1.0, static_cast<double>(std::fabs(a[i])));
    const bool same_special = (std::isnan(a[i]) && std::isnan(b[i])) || a[i] == b[i];  // inf
    if (!same_special && !(std::fabs(static_cast<double>(a[i]) - b[i]) <= tol) && ++bad <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << b[i] << " on the GPU, " << a[i]
                    << " on the CPU";
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

using MakeOptimizer = std::function<std::unique_ptr<Optimizer>(const std::vector<Tensor>&)>;

std::vector<Tensor> leaves(const std::vector<Shape>& shapes, DType dtype, Device device,
                           Generator* gen) {
  std::vector<Tensor> params;
  for (const Shape& shape : shapes) {
    Tensor p = Tensor::randn(shape, DType::f32, kCPU, gen).to(dtype);
    p = device == kCPU ? p : p.to(device);
    p.set_requires_grad(true);
    params.push_back(p);
  }
  return params;
}

// Peak allocated bytes above the current level on `device` while `fn` runs.
int64_t peak_growth(Device device, const std::function<void()>& fn) {
  const int64_t before = static_cast<int64_t>(memory_allocated(device));
  reset_peak_memory_stats(device);
  fn();
  return static_cast<int64_t>(max_memory_allocated(device)) - before;
}

// `steps` steps of the same optimizer on the CPU and on the GPU from the same parameters and
// gradients; parameters compared after each. The GPU's first step allocates as a meta dry run
// of it.
void compare_steps(const MakeOptimizer& make, const std::vector<Shape>& shapes, DType dtype,
                   DType grad_dtype, int steps, double grad_scale, const std::string& what) {
  Generator gen(1234);
  const std::vector<Tensor> cpu = leaves(shapes, dtype, kCPU, &gen);
  std::vector<Tensor> gpu;
  for (const Tensor& p : cpu) {
    Tensor g = p.detach().to(kGpu);
    g.set_requires_grad(true);
    gpu.push_back(g);
  }
  const std::unique_ptr<Optimizer> cpu_opt = make(cpu);
  const std::unique_ptr<Optimizer> gpu_opt = make(gpu);
  for (int s = 0; s < steps; ++s) {
    for (size_t i = 0; i < cpu.size(); ++i) {
      const Tensor grad =
          scale(Tensor::randn(cpu[i].shape(), DType::f32, kCPU, &gen), grad_scale).to(grad_dtype);
      cpu[i].set_grad(grad);
      gpu[i].set_grad(grad.to(kGpu));
    }
    cpu_opt->step();
    if (s == 0) {
      const int64_t gpu_peak = peak_growth(kGpu, [&] { gpu_opt->step(); });
      std::vector<Tensor> meta;
      for (const Tensor& p : cpu) {
        Tensor m = Tensor::empty(p.shape(), p.dtype(), kMetaDevice);
        m.set_requires_grad(true);
        m.set_grad(Tensor::empty(p.shape(), grad_dtype, kMetaDevice));
        meta.push_back(m);
      }
      const std::unique_ptr<Optimizer> meta_opt = make(meta);
      EXPECT_EQ(peak_growth(kMetaDevice, [&] { meta_opt->step(); }), gpu_peak)
          << what << ": the meta dry run's peak differs from the GPU's";
    } else {
      gpu_opt->step();
    }
    for (size_t i = 0; i < cpu.size(); ++i) {
      expect_close(cpu[i], gpu[i], tolerance(dtype),
                   what + " step " + std::to_string(s) + " parameter " + std::to_string(i));
    }
  }
}

// Odd sizes, a matrix above one block, a stack of matrices, and one tensor of 4M elements.
const std::vector<Shape> kShapes = {{1}, {37}, {257, 33}, {3, 17, 129}, {1 << 22}};
const DType kFloats[] = {DType::f32, DType::bf16, DType::f16};

TEST(CudaOptim, AdamWMatchesTheCpu) {
  REQUIRE_GPU();
  for (DType grad_dtype : kFloats) {
    compare_steps([](auto& p) { return std::make_unique<AdamW>(p); }, kShapes, DType::f32,
                  grad_dtype, 3, 1.0, std::string("adamw f32 grad ") + dtype_name(grad_dtype));
  }
  compare_steps(
      [](auto& p) { return std::make_unique<AdamW>(p, AdamWOptions{.state_dtype = DType::bf16}); },
      kShapes, DType::f32, DType::f32, 3, 1.0, "adamw bf16 states");
  for (DType dtype : {DType::bf16, DType::f16}) {
    const std::string name = dtype_name(dtype);
    compare_steps(
        [](auto& p) { return std::make_unique<AdamW>(p, AdamWOptions{.kahan_summation = true}); },
        kShapes, dtype, dtype, 3, 1.0, "adamw kahan " + name);
    compare_steps([](auto& p) { return std::make_unique<AdamW>(p); }, kShapes, dtype, dtype, 3, 1.0,
                  "adamw stochastic " + name);
    compare_steps(
        [](auto& p) {
          return std::make_unique<AdamW>(
              p, AdamWOptions{.state_dtype = DType::bf16, .stochastic_rounding = false});
        },
        kShapes, dtype, DType::f32, 3, 1.0, "adamw nearest " + name);
  }
}

// Note [Tensor lists]: 300 parameters are two launches of each list kernel; each block finds its
// tensor among sizes that include ones below and above a block's elements.
std::vector<Shape> many_shapes() {
  std::vector<Shape> shapes;
  for (int i = 0; i < 300; ++i) shapes.push_back(Shape{(i % 9) * 1237 + 1});
  return shapes;
}

TEST(CudaOptim, ListsLongerThanOneLaunchMatchTheCpu) {
  REQUIRE_GPU();
  compare_steps([](auto& p) { return std::make_unique<AdamW>(p); }, many_shapes(), DType::f32,
                DType::bf16, 2, 1.0, "adamw list f32 / bf16 grads");
  compare_steps([](auto& p) { return std::make_unique<AdamW>(p); }, many_shapes(), DType::bf16,
                DType::bf16, 2, 1.0, "adamw list stochastic bf16");
  compare_steps(
      [](auto& p) { return std::make_unique<AdamW>(p, AdamWOptions{.kahan_summation = true}); },
      many_shapes(), DType::bf16, DType::bf16, 2, 1.0, "adamw list kahan bf16");
  Generator gen(3);
  std::vector<Tensor> cpu = leaves(many_shapes(), DType::f32, kCPU, &gen), gpu;
  const DType dtypes[] = {DType::f32, DType::bf16, DType::f16};
  for (size_t i = 0; i < cpu.size(); ++i) {
    cpu[i].set_grad(Tensor::randn(cpu[i].shape(), DType::f32, kCPU, &gen).to(dtypes[i % 3]));
    Tensor g = cpu[i].detach().to(kGpu);
    g.set_requires_grad(true);
    g.set_grad(cpu[i].grad().to(kGpu));
    gpu.push_back(g);
  }
  const double total_cpu = clip_grad_norm_(cpu, 1.0), total_gpu = clip_grad_norm_(gpu, 1.0);
  EXPECT_NEAR(total_gpu, total_cpu, 1e-6 * total_cpu);
  for (size_t i = 0; i < cpu.size(); ++i) {
    expect_close(cpu[i].grad(), gpu[i].grad(), tolerance(dtypes[i % 3]),
                 str_cat("clip list gradient ", i));
  }
  clip_grad_value_(cpu, 1e-3);
  clip_grad_value_(gpu, 1e-3);
  for (size_t i = 0; i < cpu.size(); ++i) {
    expect_close(cpu[i].grad(), gpu[i].grad(), tolerance(dtypes[i % 3]),
                 str_cat("clamp list gradient ", i));
  }
}

TEST(CudaOptim, AdamW8bitMatchesTheCpu) {
  REQUIRE_GPU();
  // Blockwise 8-bit states for the large tensors, fp32 states below min_8bit_size; a NaN-free
  // run and codes compared through the parameters.
  for (DType grad_dtype : kFloats) {
    compare_steps([](auto& p) { return std::make_unique<AdamW8bit>(p); }, kShapes, DType::f32,
                  grad_dtype, 3, 1.0, std::string("adamw8bit grad ") + dtype_name(grad_dtype));
  }
  // 16-bit parameters, rounded after the step and after the decay on both devices.
  for (DType dtype : {DType::bf16, DType::f16}) {
    compare_steps([](auto& p) { return std::make_unique<AdamW8bit>(p); }, kShapes, dtype, dtype, 3,
                  1.0, std::string("adamw8bit ") + dtype_name(dtype));
  }
}

TEST(CudaOptim, Lion8bitMatchesTheCpu) {
  REQUIRE_GPU();
  for (DType dtype : kFloats) {
    compare_steps(
        [](auto& p) {
          return std::make_unique<Lion8bit>(p, Lion8bitOptions{.lr = 1e-3, .weight_decay = 0.1});
        },
        kShapes, dtype, dtype, 3, 1.0, std::string("lion8bit ") + dtype_name(dtype));
  }
}

// Same 8-bit codes, absmax and 16-bit parameters on both devices: each kernel does the CPU's float
// operations in its order (Note [bitsandbytes Lion], Note [bitsandbytes 16-bit parameters]).
TEST(CudaOptim, Bnb8bitOn16BitParametersMatchesTheCpuBitForBit) {
  REQUIRE_GPU();
  for (DType dtype : {DType::bf16, DType::f16}) {
    Generator gen(6);
    Tensor cpu_adam = Tensor::randn({5000}, DType::f32, kCPU, &gen).to(dtype);
    cpu_adam.set_requires_grad(true);
    Tensor gpu_adam = cpu_adam.detach().to(kGpu);
    gpu_adam.set_requires_grad(true);
    Tensor cpu_lion = cpu_adam.detach().clone();
    cpu_lion.set_requires_grad(true);
    Tensor gpu_lion = cpu_lion.detach().to(kGpu);
    gpu_lion.set_requires_grad(true);
    AdamW8bit adam_cpu({cpu_adam}), adam_gpu({gpu_adam});
    Lion8bit lion_cpu({cpu_lion}, {.lr = 1e-3, .weight_decay = 0.1});
    Lion8bit lion_gpu({gpu_lion}, {.lr = 1e-3, .weight_decay = 0.1});
    for (int s = 0; s < 4; ++s) {
      const Tensor grad = Tensor::randn({5000}, DType::f32, kCPU, &gen).to(dtype);
      for (Tensor* p : {&cpu_adam, &cpu_lion}) p->set_grad(grad);
      for (Tensor* p : {&gpu_adam, &gpu_lion}) p->set_grad(grad.to(kGpu));
      for (Optimizer* o :
           std::initializer_list<Optimizer*>{&adam_cpu, &adam_gpu, &lion_cpu, &lion_gpu}) {
        o->step();
      }
    }
    const std::string name = dtype_name(dtype);
    EXPECT_EQ(adam_cpu.state(0, 0).state1.to_int64_vector(),
              adam_gpu.state(0, 0).state1.to(kCPU).to_int64_vector())
        << name;
    EXPECT_EQ(lion_cpu.state(0, 0).state1.to_int64_vector(),
              lion_gpu.state(0, 0).state1.to(kCPU).to_int64_vector())
        << name;
    expect_close(lion_cpu.state(0, 0).absmax1, lion_gpu.state(0, 0).absmax1, 0.0,
                 "lion8bit absmax1 " + name);
    expect_close(cpu_adam, gpu_adam, 0.0, "adamw8bit parameter " + name);
    expect_close(cpu_lion, gpu_lion, 0.0, "lion8bit parameter " + name);
  }
}

TEST(CudaOptim, AdamW8bitStatesMatchTheCpuBitForBit) {
  REQUIRE_GPU();
  Generator gen(5);
  Tensor cpu = Tensor::randn({5000}, DType::f32, kCPU, &gen);  // a short last block
  cpu.set_requires_grad(true);
  Tensor gpu = cpu.detach().to(kGpu);
  gpu.set_requires_grad(true);
  AdamW8bit a({cpu}), b({gpu});
  for (int s = 0; s < 4; ++s) {
    Tensor grad = Tensor::randn({5000}, DType::f32, kCPU, &gen);
    if (s == 2) grad.narrow(0, 4099, 1).fill_(NAN);  // a non-finite gradient element is skipped
    cpu.set_grad(grad);
    gpu.set_grad(grad.to(kGpu));
    a.step();
    b.step();
  }
  for (auto member : {&AdamW8bitState::state1, &AdamW8bitState::state2}) {
    EXPECT_EQ((a.state(0, 0).*member).to_int64_vector(),
              (b.state(0, 0).*member).to(kCPU).to_int64_vector());
  }
  expect_close(a.state(0, 0).absmax1, b.state(0, 0).absmax1, 0.0, "absmax1");
  expect_close(a.state(0, 0).absmax2, b.state(0, 0).absmax2, 0.0, "absmax2");
  expect_close(cpu, gpu, 1e-6, "8-bit parameter");
}

TEST(CudaOptim, LionAndSgdMatchTheCpu) {
  REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16}) {  // parameters as every optimizer takes them
    const std::string name = dtype_name(dtype);
    compare_steps(
        [](auto& p) { return std::make_unique<Lion>(p, LionOptions{.weight_decay = 0.1}); },
        kShapes, dtype, dtype, 3, 1.0, "lion " + name);
    compare_steps(
        [](auto& p) {
          return std::make_unique<SGD>(
              p, SGDOptions{.lr = 0.01, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
        },
        kShapes, dtype, DType::f32, 3, 1.0, "sgd nesterov " + name);
    compare_steps(
        [](auto& p) {
          return std::make_unique<SGD>(p,
                                       SGDOptions{.lr = 0.01, .momentum = 0.9, .dampening = 0.1});
        },
        kShapes, dtype, dtype, 3, 1.0, "sgd dampening " + name);
    compare_steps([](auto& p) { return std::make_unique<SGD>(p, SGDOptions{.lr = 0.01}); }, kShapes,
                  dtype, dtype, 2, 1.0, "sgd plain " + name);
  }
}

TEST(CudaOptim, AdafactorMatchesTheCpu) {
  REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::string name = dtype_name(dtype);
    compare_steps([](auto& p) { return std::make_unique<Adafactor>(p); }, kShapes, dtype, dtype, 3,
                  1.0, "adafactor relative step " + name);
    compare_steps(
        [](auto& p) {
          return std::make_unique<Adafactor>(p, AdafactorOptions{.lr = 1e-3,
                                                                 .beta1 = 0.9,
                                                                 .weight_decay = 0.01,
                                                                 .scale_parameter = false,
                                                                 .relative_step = false});
        },
        kShapes, dtype, DType::f32, 3, 1.0, "adafactor beta1 " + name);
  }
}

TEST(CudaOptim, AdafactorKeepsRmsAndLrOnTheDevice) {
  REQUIRE_GPU();
  Generator gen(3);
  Tensor cpu = Tensor::randn({65, 300}, DType::f32, kCPU, &gen);
  cpu.set_requires_grad(true);
  Tensor gpu = cpu.detach().to(kGpu);
  gpu.set_requires_grad(true);
  Adafactor a({cpu}), b({gpu});
  const Tensor grad = Tensor::randn({65, 300}, DType::f32, kCPU, &gen);
  cpu.set_grad(grad);
  gpu.set_grad(grad.to(kGpu));
  a.step();
  b.step();
  const nlohmann::json ca = a.state_dict().meta["state"]["0.0"];
  const nlohmann::json cb = b.state_dict().meta["state"]["0.0"];
  EXPECT_NEAR(cb["RMS"].get<double>(), ca["RMS"].get<double>(), 1e-6 * ca["RMS"].get<double>());
  EXPECT_NEAR(cb["lr"].get<double>(), ca["lr"].get<double>(), 1e-6 * ca["lr"].get<double>());
}

TEST(CudaOptim, LomoMatchesTheCpu) {
  REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16}) {
    compare_steps(
        [](auto& p) {
          return std::make_unique<Lomo>(
              p, LomoOptions{.lr = 0.01, .weight_decay = 0.1, .clip_grad_value = 0.5});
        },
        kShapes, dtype, dtype, 2, 1.0, std::string("lomo ") + dtype_name(dtype));
  }
}

// LOMO with clip_grad_norm: the norm of pass 0 measured on the device (no host read per
// gradient), applied in pass 1, and read back once by step().
TEST(CudaOptim, LomoClipsByTheDeviceNorm) {
  REQUIRE_GPU();
  Generator gen(11);
  const Tensor start = Tensor::randn({3000}, DType::f32, kCPU, &gen);
  const Tensor weights = scale(Tensor::randn({3000}, DType::f32, kCPU, &gen), 10.0);
  std::vector<std::pair<Tensor, double>> results;
  for (Device device : {kCPU, kGpu}) {
    Tensor param = start.clone().to(device);  // on the CPU, to(kCPU) alone would step `start`
    param.set_requires_grad(true);
    const Tensor w = weights.to(device);
    Lomo lomo({param}, {.lr = 0.1, .clip_grad_norm = 1.0});
    for (int pass = 0; pass < 2; ++pass) {
      lomo.begin_backward_pass(pass);
      backward(sum(mul(param, w)));  // the gradient is w
    }
    lomo.step();
    results.emplace_back(param.detach().to(kCPU), lomo.grad_norm());
  }
  EXPECT_NEAR(results[1].second, results[0].second, 1e-6 * results[0].second);
  expect_close(results[0].first, results[1].first, 1e-5, "lomo clipped by norm");
}

TEST(CudaOptim, ClipGradNormMatchesTheCpu) {
  REQUIRE_GPU();
  for (DType dtype : kFloats) {
    for (double p : {2.0, 1.0, 3.0, static_cast<double>(INFINITY)}) {
      for (double max_norm : {0.5, 1e6}) {
        Generator gen(21);
        std::vector<Tensor> cpu = leaves(kShapes, DType::f32, kCPU, &gen), gpu;
        for (Tensor& t : cpu) {
          t.set_grad(Tensor::randn(t.shape(), DType::f32, kCPU, &gen).to(dtype));
          Tensor g = t.detach().to(kGpu);
          g.set_requires_grad(true);
          g.set_grad(t.grad().to(kGpu));
          gpu.push_back(g);
        }
        const std::string what = str_cat("clip ", dtype_name(dtype), " p=", p, " max=", max_norm);
        const double norm_cpu = grad_norm(cpu, p), norm_gpu = grad_norm(gpu, p);
        EXPECT_NEAR(norm_gpu, norm_cpu, 1e-6 * norm_cpu) << what;
        const double total_cpu = clip_grad_norm_(cpu, max_norm, p);
        int64_t gpu_peak = 0;
        double total_gpu = 0.0;
        gpu_peak = peak_growth(kGpu, [&] { total_gpu = clip_grad_norm_(gpu, max_norm, p); });
        EXPECT_NEAR(total_gpu, total_cpu, 1e-6 * total_cpu) << what;
        for (size_t i = 0; i < cpu.size(); ++i) {
          expect_close(cpu[i].grad(), gpu[i].grad(), tolerance(dtype), what);
        }
        std::vector<Tensor> meta;
        for (const Tensor& t : cpu) {
          Tensor m = Tensor::empty(t.shape(), DType::f32, kMetaDevice);
          m.set_requires_grad(true);
          m.set_grad(Tensor::empty(t.shape(), dtype, kMetaDevice));
          meta.push_back(m);
        }
        // The host copy of the result (one read) is pinned or pageable host memory, not the
        // GPU's: the device peaks agree.
        EXPECT_EQ(peak_growth(kMetaDevice, [&] { clip_grad_norm_(meta, max_norm, p); }), gpu_peak)
            << what;
      }
    }
  }
}

TEST(CudaOptim, ClipGradNormRefusesANonFiniteNormAfterOneRead) {
  REQUIRE_GPU();
  Tensor p = Tensor::zeros({10}, DType::f32, kGpu);
  p.set_requires_grad(true);
  p.set_grad(Tensor::from_floats({1, 2, INFINITY, 4, 5, 6, 7, 8, 9, 10}, {10}).to(kGpu));
  EXPECT_THROW(clip_grad_norm_({p}, 1.0, 2.0, true), Error);
  EXPECT_EQ(p.grad().to(kCPU).to_float_vector()[0], 1.0f);  // unchanged
}

TEST(CudaOptim, GradScalerFindsInfWithOneFlag) {
  REQUIRE_GPU();
  for (DType dtype : kFloats) {
    for (bool with_inf : {false, true}) {
      Generator gen(8);
      std::vector<Tensor> cpu = leaves({{300}, {1000, 7}}, DType::f32, kCPU, &gen), gpu;
      for (Tensor& t : cpu) {
        Tensor grad = scale(Tensor::randn(t.shape(), DType::f32, kCPU, &gen), 1024.0).to(dtype);
        t.set_grad(grad);
        Tensor g = t.detach().to(kGpu);
        g.set_requires_grad(true);
        g.set_grad(grad.to(kGpu));
        gpu.push_back(g);
      }
      if (with_inf) {
        cpu[1].grad().narrow(0, 999, 1).narrow(1, 3, 1).fill_(INFINITY);
        gpu[1].grad().narrow(0, 999, 1).narrow(1, 3, 1).fill_(INFINITY);
      }
      GradScalerOptions options;
      options.allow_fp16_grads = true;
      GradScaler cpu_scaler(options), gpu_scaler(options);
      SGD cpu_sgd(cpu, {.lr = 0.1}), gpu_sgd(gpu, {.lr = 0.1});
      cpu_scaler.scale(Tensor::ones({}, DType::f32, kCPU));
      gpu_scaler.scale(Tensor::ones({}, DType::f32, kGpu));
      cpu_scaler.unscale_(cpu_sgd);
      const int64_t peak = peak_growth(kGpu, [&] { gpu_scaler.unscale_(gpu_sgd); });
      EXPECT_EQ(peak, 512);  // one f32 flag for the whole step
      EXPECT_EQ(gpu_scaler.found_inf(gpu_sgd), with_inf);
      EXPECT_EQ(gpu_scaler.step(gpu_sgd), cpu_scaler.step(cpu_sgd));
      gpu_scaler.update();
      cpu_scaler.update();
      EXPECT_EQ(gpu_scaler.get_scale(), cpu_scaler.get_scale());
      for (size_t i = 0; i < cpu.size(); ++i) {
        expect_close(cpu[i].grad(), gpu[i].grad(), 0.0, str_cat("unscaled ", dtype_name(dtype)));
        expect_close(cpu[i], gpu[i], 1e-6, "parameter after the scaler's step");
      }
    }
  }
}

}  // namespace
}  // namespace headroom

// The CUDA backend against the CPU reference: tensor kernels bit for bit, Philox draws, host
// transfers, and the caching allocator over real device memory. Skipped without a GPU.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/tensor.h"
#include "memory/device_memory.h"
#include "cuda/cuda_test_support.h"

namespace headroom {
namespace {

// Every f32 bit pattern class: random bits, wide-range normals, the formats' edges.
Tensor conversion_inputs() {
  std::vector<float> v;
  Generator g(99);
  for (float x : Tensor::randn({1 << 16}, DType::f32, kCPU, &g).to_float_vector()) {
    v.push_back(x);
    v.push_back(x * 1e-6f);
    v.push_back(x * 300.0f);
    v.push_back(x * 6e4f);
  }
  uint32_t state = 12345;
  for (int i = 0; i < (1 << 16); ++i) {
    state = state * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &state, 4);
    v.push_back(f);
  }
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f,
                  65504.0f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f}) {
    v.push_back(x);
  }
  return Tensor::from_floats(v, {static_cast<int64_t>(v.size())});
}

TEST(Cuda, ConversionsMatchTheCpuBitForBit) {
  REQUIRE_GPU();
  const Tensor cpu = conversion_inputs();
  const Tensor gpu = cpu.to(kGpu);
  for (DType dtype : {DType::f16, DType::bf16, DType::f8_e4m3fn, DType::f8_e5m2, DType::i32,
                      DType::u8, DType::boolean}) {
    for (Overflow overflow : {Overflow::ieee, Overflow::saturate}) {
      const auto expected = cpu.to(dtype, overflow).to(DType::f32).to_float_vector();
      const auto actual = gpu.to(dtype, overflow).to(DType::f32).to_float_vector();
      expect_same_bits(expected, actual, dtype_name(dtype));
    }
  }
}

TEST(Cuda, RandomDrawsMatchTheCpuBitForBit) {
  REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::bf16}) {
    Generator a(7), b(7);
    expect_same_bits(Tensor::rand({1000, 37}, dtype, kCPU, &a).to(DType::f32).to_float_vector(),
                     Tensor::rand({1000, 37}, dtype, kGpu, &b).to(DType::f32).to_float_vector(),
                     "uniform");
    expect_same_bits(Tensor::randn({999, 41}, dtype, kCPU, &a).to(DType::f32).to_float_vector(),
                     Tensor::randn({999, 41}, dtype, kGpu, &b).to(DType::f32).to_float_vector(),
                     "normal");
    EXPECT_EQ(a.offset(), b.offset());
  }
}

TEST(Cuda, FillArangeAndStridedCopies) {
  REQUIRE_GPU();
  Tensor g = Tensor::zeros({6, 5}, DType::f32, kGpu);
  g.narrow(1, 1, 3).fill_(2.5);
  Tensor c = Tensor::zeros({6, 5});
  c.narrow(1, 1, 3).fill_(2.5);
  EXPECT_EQ(g.to_float_vector(), c.to_float_vector());
  EXPECT_EQ(Tensor::arange(3, 50, 7, DType::i64, kGpu).to_int64_vector(),
            Tensor::arange(3, 50, 7, DType::i64).to_int64_vector());
  Generator gen(3);
  Tensor x = Tensor::rand({4, 7, 9}, DType::f32, kCPU, &gen);
  Tensor xg = x.to(kGpu);
  EXPECT_EQ(xg.permute({2, 0, 1}).contiguous().to_float_vector(),
            x.permute({2, 0, 1}).contiguous().to_float_vector());
  EXPECT_EQ(xg.select(1, 3).expand({2, 4, 9}).to(DType::bf16).to_float_vector(),
            x.select(1, 3).expand({2, 4, 9}).to(DType::bf16).to_float_vector());
  Tensor dst = Tensor::zeros({9, 4}, DType::f32, kGpu);
  dst.transpose(0, 1).copy_(x.select(1, 0));  // CPU source into a strided GPU destination
  EXPECT_EQ(dst.transpose(0, 1).contiguous().to_float_vector(),
            x.select(1, 0).contiguous().to_float_vector());
  EXPECT_EQ(xg.str().find("device='cuda:0'") != std::string::npos, true);
  EXPECT_THROW(Tensor::empty({2}, DType::f32, kMeta).to(kGpu).to(kCPU), Error);
}

TEST(Cuda, CachingAllocatorOverDeviceMemoryMatchesMeta) {
  REQUIRE_GPU();
  empty_cache(kGpu);
  empty_cache(kMeta);
  if (memory_reserved(kGpu) != 0 || memory_reserved(kMeta) != 0) {
    GTEST_SKIP() << "other tensors are alive; run this test in its own process (ctest does)";
  }
  // The same script on both devices must leave identical statistics: the policy is the same
  // and only the source of raw memory differs.
  auto script = [](Device device) {
    reset_accumulated_memory_stats(device);
    reset_peak_memory_stats(device);
    Tensor a = Tensor::empty({1000}, DType::f32, device);         // 4096 B, small pool
    Tensor b = Tensor::empty({3 << 20}, DType::u8, device);       // 3 MiB of a 20 MiB segment
    { Tensor c = Tensor::empty({25 << 20}, DType::u8, device); }  // a whole 26 MiB segment
    Tensor d = Tensor::empty({18 << 20}, DType::u8, device);      // reuses and splits it
    a = Tensor();
    empty_cache(device);
    return memory_stats(device);
  };
  const auto gpu = script(kGpu);
  const auto meta = script(kMeta);
  for (const auto& [key, value] : gpu) EXPECT_EQ(value, meta.at(key)) << key;
  EXPECT_EQ(gpu.at("allocated_bytes.all.peak"), 4096 + (3 << 20) + (26 << 20));
  EXPECT_EQ(gpu.at("reserved_bytes.all.current"), (20 << 20) + (26 << 20));
  EXPECT_EQ(gpu.at("num_device_free"), 1);  // the small segment, once `a` is gone
}

TEST(Cuda, OutOfMemoryReportsTheDevice) {
  REQUIRE_GPU();
  set_memory_limit(kGpu, memory_reserved(kGpu) + (64u << 20));
  try {
    Tensor t = Tensor::empty({100 << 20}, DType::u8, kGpu);
    FAIL() << "expected an OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuda:0 out of memory. Tried to allocate 100.00 MiB"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("has a total capacity of"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Its capacity limit is"), std::string::npos) << msg;
  }
  set_memory_limit(kGpu, 0);
  EXPECT_GE(memory_stats(kGpu)["num_ooms"], 1);
}

}  // namespace
}  // namespace headroom

// Tensor views, copies, conversions, devices and printing.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/tensor.h"
#include "memory/device_memory.h"

namespace headroom {
namespace {

std::vector<float> iota(int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return v;
}

TEST(Tensor, EmptyHasContiguousLayout) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::bf16);
  EXPECT_EQ(t.shape(), Shape({2, 3, 4}));
  EXPECT_EQ(t.strides(), Shape({12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.dtype(), DType::bf16);
  EXPECT_EQ(t.device(), kCPU);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_THROW(Tensor::empty({2, -1}), ValueError);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_floats(iota(24), {2, 3, 4});
  Tensor tr = t.transpose(0, 2);
  EXPECT_EQ(tr.shape(), Shape({4, 3, 2}));
  EXPECT_EQ(tr.strides(), Shape({1, 4, 12}));
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.storage(), t.storage());
  t.select(0, 1).select(0, 2).fill_(-1.0);  // elements 20..23
  EXPECT_EQ(tr.select(0, 3).select(0, 2).to_float_vector(), std::vector<float>({11, -1}));
}

TEST(Tensor, NarrowSelectPermuteExpand) {
  Tensor t = Tensor::from_floats(iota(12), {3, 4});
  EXPECT_EQ(t.narrow(1, 1, 2).to_float_vector(), std::vector<float>({1, 2, 5, 6, 9, 10}));
  EXPECT_EQ(t.narrow(0, -1, 1).to_float_vector(), std::vector<float>({8, 9, 10, 11}));
  EXPECT_EQ(t.select(1, -1).to_float_vector(), std::vector<float>({3, 7, 11}));
  EXPECT_EQ(t.permute({1, 0}).contiguous().to_float_vector(),
            std::vector<float>({0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
  Tensor row = Tensor::from_floats({1, 2}, {1, 2});
  Tensor e = row.expand({3, -1});
  EXPECT_EQ(e.strides(), Shape({0, 1}));
  EXPECT_EQ(e.to_float_vector(), std::vector<float>({1, 2, 1, 2, 1, 2}));
  EXPECT_EQ(row.expand({2, 1, 2}).shape(), Shape({2, 1, 2}));
  EXPECT_EQ(t.unsqueeze(1).shape(), Shape({3, 1, 4}));
  EXPECT_EQ(t.unsqueeze(-1).strides(), Shape({4, 1, 1}));
  EXPECT_EQ(t.unsqueeze(0).squeeze(0).shape(), Shape({3, 4}));
  EXPECT_THROW(t.narrow(1, 3, 2), IndexError);
  EXPECT_THROW(t.select(0, 3), IndexError);
  EXPECT_THROW(t.permute({0, 0}), ValueError);
  EXPECT_THROW(t.expand({3, 5}), ValueError);
  EXPECT_THROW(t.transpose(0, 2), IndexError);
}

// joined_view is narrow's inverse for adjacent pieces of one storage, and nothing else.
TEST(Tensor, JoinedViewUndoesAdjacentNarrowsOnly) {
  Tensor t = Tensor::from_floats(iota(12), {3, 4});
  const Tensor joined = Tensor::joined_view({t.narrow(1, 0, 1), t.narrow(1, 1, 3)}, 1);
  ASSERT_TRUE(joined.defined());
  EXPECT_EQ(joined.storage(), t.storage());
  EXPECT_EQ(joined.shape(), t.shape());
  EXPECT_EQ(joined.to_float_vector(), t.to_float_vector());
  EXPECT_EQ(Tensor::joined_view({t.narrow(1, 1, 2), t.narrow(1, 3, 1)}, 1).to_float_vector(),
            t.narrow(1, 1, 3).to_float_vector());
  EXPECT_EQ(Tensor::joined_view({t.narrow(0, 0, 2), t.narrow(0, 2, 1)}, 0).shape(), t.shape());
  // Out of order, with a gap, from another storage, or of other sizes: not one view.
  EXPECT_FALSE(Tensor::joined_view({t.narrow(1, 2, 2), t.narrow(1, 0, 2)}, 1).defined());
  EXPECT_FALSE(Tensor::joined_view({t.narrow(1, 0, 1), t.narrow(1, 2, 2)}, 1).defined());
  EXPECT_FALSE(Tensor::joined_view({t.narrow(1, 0, 2), t.clone().narrow(1, 2, 2)}, 1).defined());
  EXPECT_FALSE(
      Tensor::joined_view({t.narrow(0, 0, 1).narrow(1, 0, 2), t.narrow(1, 2, 2)}, 1).defined());
  EXPECT_FALSE(Tensor::joined_view({t.narrow(1, 0, 2), Tensor()}, 1).defined());
}

TEST(Tensor, ViewNeedsCompatibleStridesReshapeCopies) {
  Tensor t = Tensor::from_floats(iota(24), {2, 3, 4});
  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape(), Shape({6, 4}));
  EXPECT_EQ(v.storage(), t.storage());
  // A transposed tensor can still be viewed where dims stay contiguous in memory.
  Tensor tr = t.transpose(0, 1);  // [3, 2, 4], strides [4, 12, 1]
  Tensor split = tr.view({3, 2, 2, 2});
  EXPECT_EQ(split.strides(), Shape({4, 12, 2, 1}));
  EXPECT_THROW(tr.view({6, 4}), ValueError);
  Tensor r = tr.reshape({6, 4});
  EXPECT_NE(r.storage(), t.storage());
  EXPECT_EQ(r.to_float_vector(), tr.contiguous().to_float_vector());
  EXPECT_EQ(t.flatten().shape(), Shape({24}));
}

// As torch.tensor(2.).view(1, 1): a 0-d tensor views as any shape of one element (the backward
// of sum(x, 0) over a 1-D x views its 0-d gradient so).
TEST(Tensor, ViewOfAZeroDimTensor) {
  const Tensor s = Tensor::from_floats({2.0f}, {});
  const Tensor v = s.view({1, 1});
  EXPECT_EQ(v.shape(), Shape({1, 1}));
  EXPECT_EQ(v.storage(), s.storage());
  EXPECT_EQ(v.to_float_vector(), std::vector<float>({2.0f}));
  EXPECT_EQ(v.view({}).shape(), Shape({}));
  EXPECT_THROW(s.view({2}), ValueError);
}

TEST(Tensor, CopyBroadcastsAndConverts) {
  Tensor dst = Tensor::zeros({2, 3}, DType::bf16);
  dst.copy_(Tensor::from_floats({1.5f, -2.0f, 3.25f}, {3}));
  EXPECT_EQ(dst.to_float_vector(), std::vector<float>({1.5f, -2, 3.25f, 1.5f, -2, 3.25f}));
  // Copy into a strided destination.
  Tensor wide = Tensor::zeros({3, 2});
  wide.transpose(0, 1).copy_(Tensor::from_floats(iota(6), {2, 3}));
  EXPECT_EQ(wide.to_float_vector(), std::vector<float>({0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(dst.copy_(Tensor::zeros({4})), ValueError);
}

TEST(Tensor, IntegerConversionsMatchPyTorch) {
  Tensor f = Tensor::from_floats({-2.7f, -0.5f, 0.5f, 2.7f, NAN, 1e20f}, {6});
  // Truncation toward zero; NaN and out-of-range saturate where C++ leaves it undefined.
  EXPECT_EQ(f.to(DType::i64).to_int64_vector(), std::vector<int64_t>({-2, 0, 0, 2, 0, INT64_MAX}));
  EXPECT_EQ(f.to(DType::boolean).to_int64_vector(), std::vector<int64_t>({1, 1, 1, 1, 1, 1}));
  Tensor i = Tensor::from_ints({-1, 256, 300, 0}, {4});
  EXPECT_EQ(i.to(DType::u8).to_int64_vector(), std::vector<int64_t>({255, 0, 44, 0}));  // wraps
  EXPECT_EQ(i.to(DType::boolean).to_int64_vector(), std::vector<int64_t>({1, 1, 1, 0}));
  EXPECT_EQ(Tensor::from_ints({16777217}, {1}).to(DType::f32).item(), 16777216.0);
  EXPECT_EQ(Tensor::from_ints({3}, {1}, DType::i32).to(DType::bf16).item(), 3.0);
}

TEST(Tensor, OverflowModesForNarrowFormats) {
  Tensor big = Tensor::from_floats({500.0f, -1e6f, 70000.0f, INFINITY}, {4});
  const auto ieee = big.to(DType::f8_e4m3fn).to_float_vector();
  EXPECT_TRUE(std::isnan(ieee[0]) && std::isnan(ieee[1]) &&
              std::isnan(ieee[3]));  // no inf in e4m3fn
  EXPECT_EQ(big.to(DType::f8_e4m3fn, Overflow::saturate).to_float_vector(),
            std::vector<float>({448, -448, 448, 448}));
  EXPECT_EQ(big.to(DType::f16).to_float_vector(),
            std::vector<float>({500, -INFINITY, INFINITY, INFINITY}));
  EXPECT_EQ(big.to(DType::f16, Overflow::saturate).to_float_vector(),
            std::vector<float>({500, -65504, 65504, 65504}));
  // The strided path saturates exactly as the contiguous (vectorised) one.
  Tensor strided = Tensor::zeros({4, 2}).transpose(0, 1);
  strided.select(0, 0).copy_(big);
  EXPECT_EQ(strided.select(0, 0).to(DType::f8_e5m2, Overflow::saturate).to_float_vector(),
            std::vector<float>({512, -57344, 57344, 57344}));
}

TEST(Tensor, TypedDataChecksTheDtype) {
  Tensor t = Tensor::zeros({2}, DType::bf16);
  EXPECT_NO_THROW(t.data<BFloat16>());
  EXPECT_THROW(t.data<Half>(), Error);
  EXPECT_THROW(t.data<float>(), Error);
}

TEST(Tensor, FillAndFactories) {
  EXPECT_EQ(Tensor::full({3}, 2.5, DType::f16).to_float_vector(),
            std::vector<float>({2.5f, 2.5f, 2.5f}));
  EXPECT_EQ(Tensor::ones({2}, DType::i32).to_int64_vector(), std::vector<int64_t>({1, 1}));
  Tensor t = Tensor::zeros({4, 4});
  t.narrow(1, 1, 2).fill_(7.0);
  EXPECT_EQ(t.select(0, 3).to_float_vector(), std::vector<float>({0, 7, 7, 0}));
  EXPECT_EQ(Tensor::arange(0, 5).to_float_vector(), std::vector<float>({0, 1, 2, 3, 4}));
  EXPECT_EQ(Tensor::arange(1, 2, 0.25).to_float_vector(), std::vector<float>({1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(Tensor::arange(10, 0, -3, DType::i64).to_int64_vector(),
            std::vector<int64_t>({10, 7, 4, 1}));
  EXPECT_THROW(Tensor::arange(0, 5, 0), ValueError);
  EXPECT_THROW(Tensor::arange(5, 0, 1), ValueError);
  EXPECT_DOUBLE_EQ(Tensor::full({1, 1}, 3.0).item(), 3.0);
  EXPECT_THROW(Tensor::zeros({2}).item(), ValueError);
}

TEST(Tensor, LargeCopiesUseEveryPathCorrectly) {
  // Big enough to go parallel; contiguous, strided and converting paths.
  Generator g(1);
  Tensor src = Tensor::rand({512, 300}, DType::f32, kCPU, &g);
  Tensor half = src.to(DType::bf16);
  Tensor back = half.to(DType::f32);
  const auto a = src.to_float_vector(), b = back.to_float_vector();
  for (size_t i = 0; i < a.size(); i += 997) EXPECT_NEAR(a[i], b[i], 0.004);
  Tensor t = src.transpose(0, 1).contiguous();
  EXPECT_EQ(t.transpose(0, 1).contiguous().to_float_vector(), a);
}

TEST(Tensor, MetaTensorsAllocateButHoldNoData) {
  const size_t before = memory_allocated(kMeta);
  {
    Tensor m = Tensor::empty({1024, 1024, 256}, DType::f32, kMeta);  // 1 GiB, no memory
    EXPECT_EQ(memory_allocated(kMeta) - before, size_t{1} << 30);
    m.fill_(1.0);
    m.normal_();
    Tensor v = m.transpose(0, 2).contiguous();
    EXPECT_EQ(v.device(), kMeta);
    EXPECT_EQ(memory_allocated(kMeta) - before, size_t{2} << 30);
    EXPECT_EQ(m.str(), "tensor(..., device='meta', size=(1024, 1024, 256))");
    EXPECT_THROW(m.to(kCPU), Error);
    EXPECT_THROW(m.data<float>(), Error);
    Tensor c = Tensor::ones({3}).to(kMeta);
    EXPECT_EQ(c.device(), kMeta);
  }
  EXPECT_EQ(memory_allocated(kMeta), before);
}

TEST(Tensor, CudaIsAnErrorWithoutAGpu) {
  if (cuda_is_available()) GTEST_SKIP() << "a GPU is present; covered by the cuda tests";
  EXPECT_THROW(Tensor::empty({4}, DType::f32, Device::parse("cuda:0")), Error);
  EXPECT_THROW(Device::parse("cuda:x"), ValueError);
  EXPECT_EQ(Device::parse("cuda").str(), "cuda:0");
}

TEST(Tensor, PrintsOnlyTheEdgesOfLargeTensors) {
  Tensor t = Tensor::arange(0, 2000).view({40, 50});
  const std::string s = t.str();
  // Rows 0-2 and 37-39, columns 0-2 and 47-49; element [0, 3] is hidden.
  EXPECT_NE(s.find("4.9000e+01"), std::string::npos) << s;
  EXPECT_NE(s.find("1.9990e+03"), std::string::npos) << s;
  EXPECT_NE(s.find("1.8500e+03"), std::string::npos) << s;  // [37, 0]
  EXPECT_EQ(s.find("3.0000e+00"), std::string::npos) << s;
  EXPECT_EQ(s.find("1.5000e+02"), std::string::npos) << s;  // [3, 0]
  EXPECT_NE(s.find("        ...,\n"), std::string::npos) << s;
  // Gathering from a strided view prints what its contiguous copy prints.
  Tensor tr = t.transpose(0, 1);
  EXPECT_EQ(tr.str(), tr.contiguous().str());
}

TEST(Tensor, PrintsLikePyTorch) {
  EXPECT_EQ(Tensor::arange(0, 6).view({2, 3}).str(),
            "tensor([[0., 1., 2.],\n        [3., 4., 5.]])");
  EXPECT_EQ(Tensor::from_floats({0.1f, 2.5f}, {2}).str(), "tensor([0.1000, 2.5000])");
  EXPECT_EQ(Tensor::from_floats({1e-5f, 1.0f}, {2}).str(), "tensor([1.0000e-05, 1.0000e+00])");
  EXPECT_EQ(Tensor::from_floats({1, 2}, {2}, DType::bf16).str(),
            "tensor([1., 2.], dtype=bfloat16)");
  EXPECT_EQ(Tensor::from_ints({1, -20, 3}, {3}).str(), "tensor([  1, -20,   3])");
  EXPECT_EQ(Tensor::from_ints({1, 0}, {2}, DType::boolean).str(), "tensor([ True, False])");
  EXPECT_EQ(Tensor::full({}, 2.0).str(), "tensor(2.)");
  EXPECT_EQ(Tensor::from_floats({NAN, 1.5f, -INFINITY}, {3}).str(),
            "tensor([   nan, 1.5000,   -inf])");
  EXPECT_EQ(Tensor::arange(0, 8).view({2, 2, 2}).str(),
            "tensor([[[0., 1.],\n         [2., 3.]],\n\n        [[4., 5.],\n         [6., 7.]]])");
  const std::string big = Tensor::arange(0, 2000).str();
  // Integral values spanning more than 1000x switch to scientific notation; lines wrap at 80.
  EXPECT_EQ(big,
            "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
            "        1.9990e+03])");
  EXPECT_EQ(Tensor::arange(0, 300).view({100, 3}).narrow(0, 0, 2).str(),
            "tensor([[0., 1., 2.],\n        [3., 4., 5.]])");
  EXPECT_EQ(Tensor::from_floats({0, NAN}, {2}).str(), "tensor([0., nan])");
  EXPECT_EQ(Tensor::zeros({2, 0}).str(), "tensor([], size=(2, 0))");
  EXPECT_EQ(Tensor::arange(0, 30, 1, DType::i64).str(),
            "tensor([ 0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14, 15, 16, 17,\n"
            "        18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29])");
}

}  // namespace
}  // namespace headroom

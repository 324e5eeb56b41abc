// Shape storage and inference helpers.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/shape.h"

namespace headroom {
namespace {

TEST(Shape, InlineAndHeapStorage) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  Shape big{1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(big.ndim(), 8);
  EXPECT_EQ(big[7], 8);
  EXPECT_EQ(big.numel(), 40320);
  Shape copy = big;
  copy.erase(0);
  EXPECT_EQ(copy, Shape({2, 3, 4, 5, 6, 7, 8}));
  copy.insert(0, 9);
  EXPECT_EQ(copy[0], 9);
  EXPECT_EQ(Shape().numel(), 1);
}

TEST(Shape, ContiguousStrides) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), Shape({12, 4, 1}));
  EXPECT_EQ(contiguous_strides({2, 0, 4}), Shape({4, 4, 1}));  // as PyTorch: max(size, 1)
}

// A zero-sized dim makes numel 0 whatever follows, but strides still multiply the later dims:
// those products must not overflow silently (issue 19, defect 12).
TEST(Shape, ProductsOfDimsAreOverflowChecked) {
  const int64_t huge = int64_t{1} << 40;
  EXPECT_EQ(Shape({0, huge, huge}).numel(), 0);
  EXPECT_THROW(contiguous_strides({0, huge, huge}), ValueError);
  EXPECT_THROW(Shape({huge, huge}).numel(), ValueError);
  EXPECT_THROW(infer_size({huge, huge, -1}, 0), ValueError);
  EXPECT_EQ(contiguous_strides({huge, 1 << 20, 1 << 2}), Shape({int64_t{1} << 22, 4, 1}));
}

TEST(Shape, Broadcast) {
  EXPECT_EQ(broadcast_shapes({3, 1, 5}, {4, 1}), Shape({3, 4, 5}));
  EXPECT_EQ(broadcast_shapes({}, {2, 2}), Shape({2, 2}));
  EXPECT_THROW(broadcast_shapes({3, 2}, {3}), ValueError);
}

TEST(Shape, InferSize) {
  EXPECT_EQ(infer_size({-1, 4}, 12), Shape({3, 4}));
  EXPECT_THROW(infer_size({-1, -1}, 12), ValueError);
  EXPECT_THROW(infer_size({5, -1}, 12), ValueError);
  EXPECT_THROW(infer_size({2, 2}, 12), ValueError);
}

TEST(Shape, WrapDim) {
  EXPECT_EQ(wrap_dim(-1, 3), 2);
  EXPECT_EQ(wrap_dim(0, 0), 0);
  try {
    wrap_dim(3, 3);
    FAIL();
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("[-3, 2]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace headroom

// Tensor shapes and strides: a small inline vector of int64 plus the shape inference helpers
// (element counts, contiguous strides, broadcasting, dimension wrapping) every op uses.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <vector>

namespace headroom {

// Dimensions live inline up to kInlineDims; transformer tensors rarely exceed 5.
class Shape {
 public:
  static constexpr int kInlineDims = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);
  Shape(const int64_t* dims, int ndim);

  int ndim() const { return ndim_; }
  bool empty() const { return ndim_ == 0; }
  int64_t operator[](int i) const { return data()[i]; }
  int64_t& operator[](int i) { return data()[i]; }
  const int64_t* data() const { return ndim_ <= kInlineDims ? inline_ : heap_.data(); }
  int64_t* data() { return ndim_ <= kInlineDims ? inline_ : heap_.data(); }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + ndim_; }

  void push_back(int64_t d);
  void insert(int pos, int64_t d);
  void erase(int pos);
  std::vector<int64_t> to_vector() const { return {begin(), end()}; }

  // Product of the dimensions (1 for a scalar).
  int64_t numel() const;

  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }

  std::string str() const;  // "[2, 3, 4]"

 private:
  int ndim_ = 0;
  int64_t inline_[kInlineDims] = {};
  std::vector<int64_t> heap_;  // used only when ndim_ > kInlineDims
};

std::ostream& operator<<(std::ostream& out, const Shape& shape);

// Strides are counted in elements, as PyTorch does.
using Strides = Shape;

// Row-major strides of a shape.
Strides contiguous_strides(const Shape& shape);

// Wraps a possibly negative dimension index into [0, ndim); IndexError names the range.
int wrap_dim(int64_t dim, int ndim);

// NumPy broadcasting of two shapes; ValueError names both shapes and the dimension at fault.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Resolves a single -1 in `shape` so that it holds `numel` elements; ValueError otherwise.
Shape infer_size(const Shape& shape, int64_t numel);

}  // namespace headroom

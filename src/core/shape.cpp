// Shape storage and shape inference helpers.
#include "core/shape.h"

#include <sstream>

#include "core/error.h"

namespace headroom {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) push_back(d);
}

Shape::Shape(const std::vector<int64_t>& dims) {
  for (int64_t d : dims) push_back(d);
}

Shape::Shape(const int64_t* dims, int ndim) {
  for (int i = 0; i < ndim; ++i) push_back(dims[i]);
}

void Shape::push_back(int64_t d) {
  if (ndim_ < kInlineDims) {
    inline_[ndim_++] = d;
    return;
  }
  if (ndim_ == kInlineDims) heap_.assign(inline_, inline_ + kInlineDims);
  heap_.push_back(d);
  ++ndim_;
}

void Shape::insert(int pos, int64_t d) {
  std::vector<int64_t> dims = to_vector();
  dims.insert(dims.begin() + pos, d);
  *this = Shape(dims);
}

void Shape::erase(int pos) {
  std::vector<int64_t> dims = to_vector();
  dims.erase(dims.begin() + pos);
  *this = Shape(dims);
}

namespace {

// a * b, or ValueError naming `shape` when the product leaves int64 (an untrusted file's dims).
int64_t checked_product(int64_t a, int64_t b, const Shape& shape, const char* what) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw ValueError(str_cat("shape ", shape, ": its ", what, " overflows 2^63"));
  }
  return out;
}

}  // namespace

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : *this) n = checked_product(n, d, *this, "element count");
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (ndim_ != other.ndim_) return false;
  for (int i = 0; i < ndim_; ++i) {
    if ((*this)[i] != other[i]) return false;
  }
  return true;
}

std::string Shape::str() const {
  std::ostringstream out;
  out << '[';
  for (int i = 0; i < ndim_; ++i) out << (i ? ", " : "") << (*this)[i];
  out << ']';
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Shape& shape) { return out << shape.str(); }

Strides contiguous_strides(const Shape& shape) {
  Strides strides = shape;
  int64_t running = 1;
  for (int i = shape.ndim() - 1; i >= 0; --i) {
    strides[i] = running;
    // Checked even past a zero-sized dim: the strides still multiply every later dim.
    running = checked_product(running, shape[i] > 1 ? shape[i] : 1, shape, "stride");
  }
  return strides;
}

int wrap_dim(int64_t dim, int ndim) {
  const int64_t rank = ndim > 0 ? ndim : 1;  // a scalar accepts dims 0 and -1, as PyTorch
  if (dim < -rank || dim >= rank) {
    throw IndexError(str_cat("dimension ", dim, " is out of range for a tensor of ", ndim,
                             " dimensions (expected [", -rank, ", ", rank - 1, "])"));
  }
  return static_cast<int>(dim < 0 ? dim + rank : dim);
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const int ndim = a.ndim() > b.ndim() ? a.ndim() : b.ndim();
  Shape out;
  for (int i = 0; i < ndim; ++i) {
    const int ia = i - (ndim - a.ndim()), ib = i - (ndim - b.ndim());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      throw ValueError(str_cat("shapes ", a, " and ", b, " cannot be broadcast: dimension ", i,
                               " is ", da, " and ", db));
    }
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

Shape infer_size(const Shape& shape, int64_t numel) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.ndim(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw ValueError(str_cat("shape ", shape, " has more than one -1"));
      infer = i;
    } else if (shape[i] < 0) {
      throw ValueError(str_cat("shape ", shape, " has a negative dimension ", shape[i]));
    } else {
      known = checked_product(known, shape[i], shape, "element count");
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) {
      throw ValueError(str_cat("shape ", shape, " is invalid for ", numel, " elements"));
    }
    out[infer] = numel / known;
  } else if (known != numel) {
    throw ValueError(str_cat("shape ", shape, " is invalid for ", numel, " elements"));
  }
  return out;
}

}  // namespace headroom

// Tensor printing as torch/_tensor_str.py does it: one formatter per tensor (integral, fixed or
// scientific, width from the non-zero finite values), summaries of 3 edge items around " ..."
// above 1000 elements (only those are copied off the device), lines wrapped at 80 characters,
// and the dtype and device as suffixes when they are not the defaults.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/tensor.h"

namespace headroom {
namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int kLineWidth = 80;
constexpr int kPrecision = 4;

class Formatter {
 public:
  Formatter(DType dtype, const std::vector<double>& shown) : dtype_(dtype) {
    if (!is_floating(dtype)) {
      for (double v : shown) width_ = std::max(width_, plain(v).size());
      return;
    }
    double max_abs = 0, min_abs = INFINITY;
    bool any = false;
    for (double v : shown) {
      if (!std::isfinite(v) || v == 0) continue;
      any = true;
      integral_ = integral_ && v == std::ceil(v);
      max_abs = std::max(max_abs, std::fabs(v));
      min_abs = std::min(min_abs, std::fabs(v));
    }
    if (!any) return;
    const bool wide_range = max_abs / min_abs > 1000.0 || max_abs > 1.0e8;
    scientific_ = integral_ ? wide_range : wide_range || min_abs < 1.0e-4;
    for (double v : shown) {
      if (!std::isfinite(v) || v == 0) continue;
      width_ = std::max(width_, fixed_or_sci(v).size());
    }
  }

  size_t width() const { return width_; }

  std::string format(double v) const {
    const std::string s = is_floating(dtype_) ? fixed_or_sci(v) : plain(v);
    return std::string(width_ > s.size() ? width_ - s.size() : 0, ' ') + s;
  }

 private:
  std::string plain(double v) const {
    if (dtype_ == DType::boolean) return v != 0 ? "True" : "False";
    return std::to_string(static_cast<long long>(v));
  }

  // Python's "{:.4e}" / "{:.0f}" / "{:.4f}" spellings, nan and inf included.
  std::string fixed_or_sci(double v) const {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    char buf[64];
    if (scientific_) {
      std::snprintf(buf, sizeof buf, "%.*e", kPrecision, v);
    } else if (integral_) {
      std::snprintf(buf, sizeof buf, "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof buf, "%.*f", kPrecision, v);
    }
    return buf;
  }

  DType dtype_;
  bool integral_ = true;
  bool scientific_ = false;
  size_t width_ = 1;
};

// The printed elements as a small CPU tensor, as PyTorch's get_summarized_data: every dimension
// longer than 2 * kEdgeItems keeps its first and last kEdgeItems (elided[d] marks those). Each
// combination of head and tail slices is one copy_, so only these elements leave the device.
Tensor printed_elements(const Tensor& t, bool summarize, std::vector<bool>* elided) {
  elided->assign(static_cast<size_t>(t.ndim()), false);
  if (!summarize) return t.to(kCPU);
  Shape shape = t.shape();
  std::vector<int> dims;
  for (int d = 0; d < t.ndim(); ++d) {
    if (shape[d] > 2 * kEdgeItems) {
      shape[d] = 2 * kEdgeItems;
      (*elided)[d] = true;
      dims.push_back(d);
    }
  }
  Tensor out = Tensor::empty(shape, t.dtype(), kCPU);
  for (uint64_t mask = 0; mask < (uint64_t{1} << dims.size()); ++mask) {
    Tensor src = t, dst = out;
    for (size_t k = 0; k < dims.size(); ++k) {
      const bool tail = (mask >> k) & 1;
      src = src.narrow(dims[k], tail ? t.size(dims[k]) - kEdgeItems : 0, kEdgeItems);
      dst = dst.narrow(dims[k], tail ? kEdgeItems : 0, kEdgeItems);
    }
    dst.copy_(src);
  }
  return out;
}

std::string format_vector(const std::vector<double>& values, int64_t base, int64_t n,
                          const Formatter& f, bool elided, int indent) {
  std::vector<std::string> items;
  for (int64_t i = 0; i < n; ++i) {
    if (elided && i == kEdgeItems) items.push_back(" ...");
    items.push_back(f.format(values[base + i]));
  }
  const size_t per_line = std::max<size_t>(
      1, static_cast<size_t>((kLineWidth - indent) / static_cast<int>(f.width() + 2)));
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) {
      out += ',';
      if (i % per_line == 0) {
        out += '\n';
        out.append(static_cast<size_t>(indent + 1), ' ');
      } else {
        out += ' ';
      }
    }
    out += items[i];
  }
  return out + "]";
}

std::string format_nested(const Shape& shape, const std::vector<double>& values, const Formatter& f,
                          const std::vector<bool>& elided, int dim, int64_t base, int indent) {
  const int remaining = shape.ndim() - dim;
  if (remaining == 0) return f.format(values[base]);
  if (remaining == 1) return format_vector(values, base, shape[dim], f, elided[dim], indent);
  int64_t inner = 1;
  for (int d = dim + 1; d < shape.ndim(); ++d) inner *= shape[d];
  std::string separator = ",";
  separator.append(static_cast<size_t>(remaining - 1), '\n');
  separator.append(static_cast<size_t>(indent + 1), ' ');
  std::string out = "[";
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (i > 0) out += separator;
    if (elided[dim] && i == kEdgeItems) {
      out += "...";
      out += separator;
    }
    out += format_nested(shape, values, f, elided, dim + 1, base + i * inner, indent + 1);
  }
  return out + "]";
}

std::string add_suffixes(std::string body, const std::vector<std::string>& suffixes, int indent) {
  // As Python's len(s) - s.rfind("\n") + 1, where rfind gives -1 without a newline.
  const size_t newline = body.rfind('\n');
  size_t last_line = body.size() + 1 - (newline == std::string::npos ? size_t(-1) : newline);
  for (const std::string& suffix : suffixes) {
    if (last_line + suffix.size() + 2 > static_cast<size_t>(kLineWidth)) {
      body += ",\n";
      body.append(static_cast<size_t>(indent), ' ');
      body += suffix;
      last_line = static_cast<size_t>(indent) + suffix.size();
    } else {
      body += ", " + suffix;
      last_line += suffix.size() + 2;
    }
  }
  return body + ")";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  const int indent = static_cast<int>(prefix.size());
  std::vector<std::string> suffixes;
  if (!device().is_cpu()) suffixes.push_back("device='" + device().str() + "'");
  auto size_suffix = [&] {
    std::ostringstream size;
    size << "size=(";
    for (int i = 0; i < ndim(); ++i) size << (i ? ", " : "") << shape_[i];
    size << (ndim() == 1 ? ",)" : ")");
    return size.str();
  };
  const bool default_dtype =
      dtype_ == DType::f32 || dtype_ == DType::i64 || dtype_ == DType::boolean;
  if (device().is_meta()) {
    suffixes.push_back(size_suffix());
    if (!default_dtype) suffixes.push_back(std::string("dtype=") + dtype_traits(dtype_).torch_name);
    return add_suffixes(prefix + "...", suffixes, indent);
  }
  if (numel() == 0 && ndim() != 1) suffixes.push_back(size_suffix());
  if (!default_dtype) suffixes.push_back(std::string("dtype=") + dtype_traits(dtype_).torch_name);
  if (numel() == 0) return add_suffixes(prefix + "[]", suffixes, indent);

  std::vector<bool> elided;
  const Tensor printed = printed_elements(*this, numel() > kSummarizeThreshold, &elided);
  std::vector<double> values;
  if (is_floating(dtype_)) {
    for (float v : printed.to_float_vector()) values.push_back(v);
  } else {
    for (int64_t v : printed.to_int64_vector()) values.push_back(static_cast<double>(v));
  }
  const Formatter f(dtype_, values);
  return add_suffixes(prefix + format_nested(printed.shape(), values, f, elided, 0, 0, indent),
                      suffixes, indent);
}

}  // namespace headroom

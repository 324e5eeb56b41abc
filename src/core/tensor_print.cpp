// Tensor printing as torch/_tensor_str.py does it: one formatter per tensor (integral, fixed or
// scientific, width from the non-zero finite values), summaries of 3 edge items around " ..."
// above 1000 elements, lines wrapped at 80 characters, and the dtype and device as suffixes
// when they are not the defaults.
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

// Row-major element offsets of the values that are printed.
void collect_shown(const Shape& shape, bool summarize, int dim, int64_t base,
                   std::vector<int64_t>* out) {
  if (dim == shape.ndim()) {
    out->push_back(base);
    return;
  }
  int64_t inner = 1;
  for (int d = dim + 1; d < shape.ndim(); ++d) inner *= shape[d];
  const int64_t n = shape[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) i = n - kEdgeItems;
    collect_shown(shape, summarize, dim + 1, base + i * inner, out);
  }
}

std::string format_vector(const std::vector<double>& values, int64_t base, int64_t n,
                          const Formatter& f, bool summarize, int indent) {
  std::vector<std::string> items;
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      items.push_back(" ...");
      i = n - kEdgeItems;
    }
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

std::string format_nested(const Shape& shape, const std::vector<double>& values,
                          const Formatter& f, bool summarize, int dim, int64_t base, int indent) {
  const int remaining = shape.ndim() - dim;
  if (remaining == 0) return f.format(values[base]);
  if (remaining == 1) return format_vector(values, base, shape[dim], f, summarize, indent);
  int64_t inner = 1;
  for (int d = dim + 1; d < shape.ndim(); ++d) inner *= shape[d];
  std::string separator = ",";
  separator.append(static_cast<size_t>(remaining - 1), '\n');
  separator.append(static_cast<size_t>(indent + 1), ' ');
  const int64_t n = shape[dim];
  std::string out = "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out += separator;
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      out += "...";
      out += separator;
      i = n - kEdgeItems;
    }
    out += format_nested(shape, values, f, summarize, dim + 1, base + i * inner, indent + 1);
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

  std::vector<double> values;
  if (is_floating(dtype_)) {
    for (float v : to_float_vector()) values.push_back(v);
  } else {
    for (int64_t v : to_int64_vector()) values.push_back(static_cast<double>(v));
  }
  const bool summarize = numel() > kSummarizeThreshold;
  std::vector<int64_t> shown_offsets;
  collect_shown(shape_, summarize, 0, 0, &shown_offsets);
  std::vector<double> shown;
  for (int64_t i : shown_offsets) shown.push_back(values[i]);
  const Formatter f(dtype_, shown);
  return add_suffixes(prefix + format_nested(shape_, values, f, summarize, 0, 0, indent), suffixes,
                      indent);
}

}  // namespace headroom

// write_plot_png: a small rasteriser (anti-aliased strokes and discs, the 5x7 bitmap font) on an
// RGB canvas, axes with 1-2-5 ticks, and libpng encoding into memory before an atomic write.
#include "io/line_plot.h"

#include <png.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string_view>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/bitmap_font.h"

namespace headroom {
namespace {

struct Rgb {
  uint8_t r, g, b;
};

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kFrame{60, 60, 60};
constexpr Rgb kGrid{228, 228, 228};
constexpr Rgb kText{30, 30, 30};

Rgb palette_color(size_t index) {
  const uint32_t rgb = plot_series_color(index);
  return {static_cast<uint8_t>(rgb >> 16), static_cast<uint8_t>(rgb >> 8),
          static_cast<uint8_t>(rgb)};
}

int text_width(std::string_view text, int scale) {
  return text.empty() ? 0 : (static_cast<int>(text.size()) * kGlyphAdvance - 1) * scale;
}

struct Rect {
  int x0, y0, x1, y1;  // [x0, x1) x [y0, y1)
};

class Canvas {
 public:
  Canvas(int width, int height)
      : width_(width),
        height_(height),
        pixels_(static_cast<size_t>(width) * height * 3, 255),
        clip_{0, 0, width, height} {}

  int width() const { return width_; }
  int height() const { return height_; }
  const std::vector<uint8_t>& pixels() const { return pixels_; }
  void set_clip(Rect clip) { clip_ = clip; }
  void reset_clip() { clip_ = {0, 0, width_, height_}; }

  void blend(int x, int y, Rgb c, double alpha) {
    if (x < clip_.x0 || x >= clip_.x1 || y < clip_.y0 || y >= clip_.y1 || alpha <= 0) return;
    alpha = std::min(alpha, 1.0);
    uint8_t* p = &pixels_[(static_cast<size_t>(y) * width_ + x) * 3];
    const uint8_t rgb[3] = {c.r, c.g, c.b};
    for (int k = 0; k < 3; ++k) {
      p[k] = static_cast<uint8_t>(std::lround(rgb[k] * alpha + p[k] * (1.0 - alpha)));
    }
  }

  void fill_rect(Rect r, Rgb c) {
    for (int y = r.y0; y < r.y1; ++y) {
      for (int x = r.x0; x < r.x1; ++x) blend(x, y, c, 1.0);
    }
  }

  void outline_rect(Rect r, Rgb c) {
    fill_rect({r.x0, r.y0, r.x1, r.y0 + 1}, c);
    fill_rect({r.x0, r.y1 - 1, r.x1, r.y1}, c);
    fill_rect({r.x0, r.y0, r.x0 + 1, r.y1}, c);
    fill_rect({r.x1 - 1, r.y0, r.x1, r.y1}, c);
  }

  // A filled anti-aliased disc: coverage falls from 1 to 0 across the last pixel of the radius.
  void disc(double cx, double cy, double radius, Rgb c) {
    for (int y = static_cast<int>(std::floor(cy - radius - 1)); y <= cy + radius + 1; ++y) {
      for (int x = static_cast<int>(std::floor(cx - radius - 1)); x <= cx + radius + 1; ++x) {
        const double d = std::hypot(x + 0.5 - cx, y + 0.5 - cy);
        blend(x, y, c, radius + 0.5 - d);
      }
    }
  }

  // `text` with its top-left corner at (x, y); `scale` repeats each font pixel.
  void text(int x, int y, std::string_view text, Rgb c, int scale = 1) {
    for (size_t i = 0; i < text.size(); ++i) {
      const int gx = x + static_cast<int>(i) * kGlyphAdvance * scale;
      for (int row = 0; row < kGlyphHeight; ++row) {
        const uint8_t bits = glyph_row(text[i], row);
        for (int col = 0; col < kGlyphWidth; ++col) {
          if (bits & (0x10 >> col)) {
            fill_rect(
                {gx + col * scale, y + row * scale, gx + (col + 1) * scale, y + (row + 1) * scale},
                c);
          }
        }
      }
    }
  }

  // `text` turned a quarter left (read bottom to top), its bottom-left corner at (x, y).
  void text_up(int x, int y, std::string_view text, Rgb c) {
    for (size_t i = 0; i < text.size(); ++i) {
      const int gy = y - static_cast<int>(i) * kGlyphAdvance;
      for (int row = 0; row < kGlyphHeight; ++row) {
        const uint8_t bits = glyph_row(text[i], row);
        for (int col = 0; col < kGlyphWidth; ++col) {
          if (bits & (0x10 >> col)) blend(x + row, gy - 1 - col, c, 1.0);
        }
      }
    }
  }

 private:
  int width_, height_;
  std::vector<uint8_t> pixels_;
  Rect clip_;
};

// One series' stroke is drawn into a coverage mask (the maximum over its segments) and blended
// once, so the joints of a polyline do not come out darker than its segments.
class StrokeMask {
 public:
  StrokeMask(int width, int height, Rect clip)
      : width_(width), coverage_(static_cast<size_t>(width) * height, 0.0f), clip_(clip) {}

  void segment(double x0, double y0, double x1, double y1, double half_width) {
    const double dx = x1 - x0, dy = y1 - y0, length2 = dx * dx + dy * dy;
    const int bx0 =
        std::max(clip_.x0, static_cast<int>(std::floor(std::min(x0, x1) - half_width - 1)));
    const int bx1 =
        std::min(clip_.x1 - 1, static_cast<int>(std::ceil(std::max(x0, x1) + half_width + 1)));
    const int by0 =
        std::max(clip_.y0, static_cast<int>(std::floor(std::min(y0, y1) - half_width - 1)));
    const int by1 =
        std::min(clip_.y1 - 1, static_cast<int>(std::ceil(std::max(y0, y1) + half_width + 1)));
    for (int y = by0; y <= by1; ++y) {
      for (int x = bx0; x <= bx1; ++x) {
        const double px = x + 0.5 - x0, py = y + 0.5 - y0;
        const double t = length2 > 0 ? std::clamp((px * dx + py * dy) / length2, 0.0, 1.0) : 0.0;
        const double d = std::hypot(px - t * dx, py - t * dy);
        const float c = static_cast<float>(std::clamp(half_width + 0.5 - d, 0.0, 1.0));
        float& cell = coverage_[static_cast<size_t>(y) * width_ + x];
        cell = std::max(cell, c);
      }
    }
  }

  void paint(Canvas& canvas, Rgb color) const {
    for (int y = clip_.y0; y < clip_.y1; ++y) {
      for (int x = clip_.x0; x < clip_.x1; ++x) {
        const float c = coverage_[static_cast<size_t>(y) * width_ + x];
        if (c > 0) canvas.blend(x, y, color, c);
      }
    }
  }

 private:
  int width_;
  std::vector<float> coverage_;
  Rect clip_;
};

// An axis: its range (the data's, with a margin), ticks and their labels. Linear axes tick at
// multiples of a 1-2-5 step; log axes at 1, 2, 5 (or 1..9) x 10^k, or every few decades.
struct Axis {
  double lo = 0, hi = 1;
  bool log = false;
  std::vector<double> ticks;
  std::vector<std::string> labels;

  double fraction(double v) const {
    return log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
               : (v - lo) / (hi - lo);
  }
};

double nice_step(double span, int target_ticks) {
  const double raw = span / target_ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * magnitude >= raw * (1 - 1e-9)) return m * magnitude;
  }
  return 10 * magnitude;
}

std::string format_number(double v, int decimals) {
  char buffer[48];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e6 || a < 1e-4)) {
    std::snprintf(buffer, sizeof buffer, "%.3g", v);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.*f", decimals, v);
  }
  return buffer;
}

Axis linear_axis(double lo, double hi, int target_ticks) {
  if (hi - lo <= std::fabs(hi) * 1e-12) {  // one value: a range around it
    const double pad = lo != 0 ? std::fabs(lo) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  Axis axis;
  // As matplotlib: the data range plus a 4% margin, so that points at the ends keep their
  // whole marker, with ticks at the multiples of the step inside it.
  const double margin = (hi - lo) * 0.04;
  axis.lo = lo - margin;
  axis.hi = hi + margin;
  const double step = nice_step(hi - lo, target_ticks);
  const int64_t first = static_cast<int64_t>(std::ceil(axis.lo / step - 1e-9));
  const int64_t last = static_cast<int64_t>(std::floor(axis.hi / step + 1e-9));
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  for (int64_t i = first; i <= last; ++i) {
    const double v = static_cast<double>(i) * step;  // multiples, so 0 is exactly 0
    axis.ticks.push_back(v);
    axis.labels.push_back(format_number(v, decimals));
  }
  return axis;
}

Axis log_axis(double lo, double hi) {
  const double span = std::max(std::log10(hi) - std::log10(lo), 0.2);
  Axis axis;
  axis.log = true;
  axis.lo = std::pow(10.0, std::log10(lo) - span * 0.04);
  axis.hi = std::pow(10.0, std::log10(hi) + span * 0.04);
  const int e0 = static_cast<int>(std::floor(std::log10(axis.lo)));
  const int e1 = static_cast<int>(std::ceil(std::log10(axis.hi)));
  const int decade_stride = std::max(1, (e1 - e0) / 8);
  for (const std::vector<int>& mantissas :
       {std::vector<int>{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}) {
    axis.ticks.clear();
    for (int e = e0; e <= e1; ++e) {
      if ((e - e0) % decade_stride != 0) continue;
      for (int m : mantissas) {
        const double v = m * std::pow(10.0, e);
        if (v >= axis.lo * (1 - 1e-12) && v <= axis.hi * (1 + 1e-12)) axis.ticks.push_back(v);
      }
    }
    if (axis.ticks.size() >= 3) break;
  }
  for (double v : axis.ticks) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%g", v);
    axis.labels.push_back(buffer);
  }
  return axis;
}

bool drawable(double x, double y, bool log_y) {
  return std::isfinite(x) && std::isfinite(y) && (!log_y || y > 0);
}

void check_input(const std::string& path, const std::vector<PlotSeries>& series,
                 const PlotOptions& options) {
  if (series.empty()) throw ValueError(str_cat(path, ": a plot needs at least one series"));
  if (options.width < 160 || options.width > 8192 || options.height < 120 ||
      options.height > 8192) {
    throw ValueError(str_cat(path, ": plot size ", options.width, "x", options.height,
                             " is outside 160x120 .. 8192x8192"));
  }
  bool any = false;
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    const std::string name =
        s.label.empty() ? str_cat("series ", i) : str_cat("series '", s.label, "'");
    if (s.x.size() != s.y.size()) {
      throw ValueError(str_cat(path, ": ", name, " has ", s.x.size(), " x values and ", s.y.size(),
                               " y values"));
    }
    if (s.x.empty()) throw ValueError(str_cat(path, ": ", name, " has no points"));
    if (s.point_labels && s.labels.size() != s.x.size()) {
      throw ValueError(str_cat(path, ": ", name, " has ", s.labels.size(), " point labels for ",
                               s.x.size(), " points"));
    }
    for (size_t k = 0; k < s.x.size(); ++k) any = any || drawable(s.x[k], s.y[k], options.log_y);
  }
  if (!any) {
    throw ValueError(str_cat(path, ": no point has finite coordinates",
                             options.log_y ? " and a positive y (log_y)" : ""));
  }
}

// libpng reports errors through longjmp; the encoder keeps only trivially destructible locals
// between setjmp and the calls that may jump.
struct PngBuffer {
  std::string bytes;
  std::string error;
};

void png_append(png_structp png, png_bytep data, png_size_t length) {
  auto* out = static_cast<PngBuffer*>(png_get_io_ptr(png));
  out->bytes.append(reinterpret_cast<const char*>(data), length);
}

void png_flush(png_structp) {}

void png_fail(png_structp png, png_const_charp message) {
  static_cast<PngBuffer*>(png_get_error_ptr(png))->error = message;
  png_longjmp(png, 1);
}

void png_warn(png_structp, png_const_charp) {}

bool encode_rgb_png(const Canvas& canvas, PngBuffer& out) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &out, png_fail, png_warn);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, &out, png_append, png_flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(canvas.width()),
               static_cast<png_uint_32>(canvas.height()), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const size_t stride = static_cast<size_t>(canvas.width()) * 3;
  for (int y = 0; y < canvas.height(); ++y) {
    png_write_row(png, const_cast<png_bytep>(canvas.pixels().data() + y * stride));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

uint32_t plot_series_color(size_t index) {
  // matplotlib's tab10, the colours readers of loss curves are used to.
  static constexpr std::array<uint32_t, 10> kTab10 = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728,
                                                      0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f,
                                                      0xbcbd22, 0x17becf};
  return kTab10[index % kTab10.size()];
}

void write_plot_png(const std::string& path, const std::vector<PlotSeries>& series,
                    const PlotOptions& options) {
  check_input(path, series, options);
  const bool log_y = options.log_y;

  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const PlotSeries& s : series) {
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (!drawable(s.x[k], s.y[k], log_y)) continue;
      x_lo = std::min(x_lo, s.x[k]);
      x_hi = std::max(x_hi, s.x[k]);
      y_lo = std::min(y_lo, s.y[k]);
      y_hi = std::max(y_hi, s.y[k]);
    }
  }
  const int width = options.width, height = options.height;
  const Axis x_axis = linear_axis(x_lo, x_hi, std::max(2, width / 110));
  const Axis y_axis =
      log_y ? log_axis(y_lo, y_hi) : linear_axis(y_lo, y_hi, std::max(2, height / 70));

  // Layout: the margins hold the title, the tick labels and the axis labels.
  int y_label_width = 0;
  for (const std::string& label : y_axis.labels) {
    y_label_width = std::max(y_label_width, text_width(label, 1));
  }
  const int top = options.title.empty() ? 16 : 12 + 2 * kGlyphHeight + 12;
  const int bottom = 10 + kGlyphHeight + 10 + (options.x_label.empty() ? 0 : kGlyphHeight + 10);
  const int left = 12 + (options.y_label.empty() ? 0 : kGlyphHeight + 10) + y_label_width + 8;
  const int right = 16 + (x_axis.labels.empty() ? 0 : text_width(x_axis.labels.back(), 1) / 2);
  const Rect plot{left, top, std::max(left + 40, width - right),
                  std::max(top + 40, height - bottom)};
  const double plot_w = plot.x1 - 1 - plot.x0, plot_h = plot.y1 - 1 - plot.y0;
  auto to_x = [&](double x) { return plot.x0 + 0.5 + x_axis.fraction(x) * plot_w; };
  auto to_y = [&](double y) { return plot.y1 - 0.5 - y_axis.fraction(y) * plot_h; };

  Canvas canvas(width, height);
  // Grid, frame, ticks and their labels.
  for (size_t i = 0; i < x_axis.ticks.size(); ++i) {
    const int x = static_cast<int>(to_x(x_axis.ticks[i]));
    canvas.fill_rect({x, plot.y0, x + 1, plot.y1}, kGrid);
    canvas.fill_rect({x, plot.y1, x + 1, plot.y1 + 4}, kFrame);
    const std::string& label = x_axis.labels[i];
    canvas.text(x - text_width(label, 1) / 2, plot.y1 + 8, label, kText);
  }
  for (size_t i = 0; i < y_axis.ticks.size(); ++i) {
    const int y = static_cast<int>(to_y(y_axis.ticks[i]));
    canvas.fill_rect({plot.x0, y, plot.x1, y + 1}, kGrid);
    canvas.fill_rect({plot.x0 - 4, y, plot.x0, y + 1}, kFrame);
    const std::string& label = y_axis.labels[i];
    canvas.text(plot.x0 - 8 - text_width(label, 1), y - (kGlyphHeight - 1) / 2, label, kText);
  }
  canvas.outline_rect(plot, kFrame);
  if (!options.title.empty()) {
    canvas.text((width - text_width(options.title, 2)) / 2, 12, options.title, kText, 2);
  }
  if (!options.x_label.empty()) {
    canvas.text((plot.x0 + plot.x1 - text_width(options.x_label, 1)) / 2,
                height - 10 - kGlyphHeight, options.x_label, kText);
  }
  if (!options.y_label.empty()) {
    canvas.text_up(12, (plot.y0 + plot.y1 + text_width(options.y_label, 1)) / 2, options.y_label,
                   kText);
  }

  // Lines, broken at points that cannot be drawn (NaN, infinite, y <= 0 on a log axis).
  const Rect inside{plot.x0 + 1, plot.y0 + 1, plot.x1 - 1, plot.y1 - 1};
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    if (!s.lines) continue;
    StrokeMask mask(width, height, inside);
    for (size_t k = 1; k < s.x.size(); ++k) {
      if (!drawable(s.x[k - 1], s.y[k - 1], log_y) || !drawable(s.x[k], s.y[k], log_y)) continue;
      mask.segment(to_x(s.x[k - 1]), to_y(s.y[k - 1]), to_x(s.x[k]), to_y(s.y[k]), 1.0);
    }
    if (s.x.size() == 1 && drawable(s.x[0], s.y[0], log_y)) {
      mask.segment(to_x(s.x[0]), to_y(s.y[0]), to_x(s.x[0]), to_y(s.y[0]), 1.5);  // a lone point
    }
    mask.paint(canvas, palette_color(i));
  }
  // Markers, then their labels (outside the plot's clip so that labels at the edge still show).
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    if (!s.markers) continue;
    canvas.set_clip(inside);
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (drawable(s.x[k], s.y[k], log_y)) {
        canvas.disc(to_x(s.x[k]), to_y(s.y[k]), 3.5, palette_color(i));
      }
    }
    canvas.reset_clip();
    if (!s.point_labels) continue;
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (!drawable(s.x[k], s.y[k], log_y) || s.labels[k].empty()) continue;
      const int px = static_cast<int>(to_x(s.x[k])), py = static_cast<int>(to_y(s.y[k]));
      const int w = text_width(s.labels[k], 1);
      const int tx = px + 7 + w < width ? px + 7 : px - 7 - w;  // left of the point at the edge
      canvas.text(tx, py - kGlyphHeight - 3, s.labels[k], kText);
    }
  }

  // Legend: top right inside the plot, where falling loss curves leave room.
  std::vector<size_t> listed;
  int legend_text = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    if (series[i].label.empty()) continue;
    listed.push_back(i);
    legend_text = std::max(legend_text, text_width(series[i].label, 1));
  }
  if (!listed.empty()) {
    const int row = kGlyphHeight + 7, sample = 24;
    const int box_w = 8 + sample + 6 + legend_text + 8,
              box_h = 6 + row * static_cast<int>(listed.size()) + 1;
    const Rect box{plot.x1 - 10 - box_w, plot.y0 + 10, plot.x1 - 10, plot.y0 + 10 + box_h};
    canvas.fill_rect(box, kWhite);
    canvas.outline_rect(box, {190, 190, 190});
    for (size_t n = 0; n < listed.size(); ++n) {
      const PlotSeries& s = series[listed[n]];
      const Rgb color = palette_color(listed[n]);
      const int y = box.y0 + 6 + static_cast<int>(n) * row;
      const double mid = y + kGlyphHeight / 2.0;
      if (s.lines || !s.markers) {
        StrokeMask mask(width, height, box);
        mask.segment(box.x0 + 8, mid, box.x0 + 8 + sample, mid, 1.0);
        mask.paint(canvas, color);
      }
      if (s.markers) canvas.disc(box.x0 + 8 + sample / 2.0, mid, 3.5, color);
      canvas.text(box.x0 + 8 + sample + 6, y, s.label, kText);
    }
  }

  PngBuffer png;
  if (!encode_rgb_png(canvas, png)) {
    throw Error(
        str_cat(path, ": PNG encoding failed (", png.error.empty() ? "libpng" : png.error, ")"));
  }
  write_file_atomically(path, png.bytes);
}

}  // namespace headroom

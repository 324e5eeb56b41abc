// write_plot_png: axes with 1-2-5 ticks, drawn with cairo on an RGB image surface and encoded
// by cairo's PNG writer into memory before an atomic write.
#include "integrations/line_plot.h"

#include <cairo.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>

#include "core/atomic_file.h"
#include "core/error.h"

namespace headroom {
namespace {

constexpr uint32_t kFrame = 0x3c3c3c;
constexpr uint32_t kGrid = 0xe4e4e4;
constexpr uint32_t kText = 0x1e1e1e;
constexpr uint32_t kLegendEdge = 0xbebebe;
constexpr double kFontSize = 12.0, kTitleSize = 16.0;

void set_color(cairo_t* cr, uint32_t rgb) {
  cairo_set_source_rgb(cr, ((rgb >> 16) & 0xFF) / 255.0, ((rgb >> 8) & 0xFF) / 255.0,
                       (rgb & 0xFF) / 255.0);
}

struct Rect {
  double x0, y0, x1, y1;
};

// Text in the sans-serif face at `size`; its advance width.
double text_width(cairo_t* cr, const std::string& text, double size) {
  cairo_set_font_size(cr, size);
  cairo_text_extents_t extents;
  cairo_text_extents(cr, text.c_str(), &extents);
  return extents.x_advance;
}

// `text` with its baseline's left end at (x, y).
void show_text(cairo_t* cr, double x, double y, const std::string& text, double size,
               uint32_t color = kText) {
  cairo_set_font_size(cr, size);
  set_color(cr, color);
  cairo_move_to(cr, x, y);
  cairo_show_text(cr, text.c_str());
}

// A one-pixel line between pixel centres, crisp on whole pixels.
void hairline(cairo_t* cr, double x0, double y0, double x1, double y1, uint32_t color) {
  set_color(cr, color);
  cairo_set_line_width(cr, 1.0);
  cairo_move_to(cr, std::floor(x0) + 0.5, std::floor(y0) + 0.5);
  cairo_line_to(cr, std::floor(x1) + 0.5, std::floor(y1) + 0.5);
  cairo_stroke(cr);
}

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

cairo_status_t append_png(void* closure, const unsigned char* data, unsigned int length) {
  static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  return CAIRO_STATUS_SUCCESS;
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

  // RGB24: no alpha channel, so the PNG is RGB, 8 bits a channel.
  const std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height), cairo_surface_destroy);
  const std::unique_ptr<cairo_t, decltype(&cairo_destroy)> context(cairo_create(surface.get()),
                                                                   cairo_destroy);
  cairo_t* cr = context.get();
  if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) {
    throw Error(str_cat(path, ": cairo: ", cairo_status_to_string(cairo_status(cr))));
  }
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
  set_color(cr, 0xffffff);
  cairo_paint(cr);

  // Layout: the margins hold the title, the tick labels and the axis labels.
  double y_label_width = 0;
  for (const std::string& label : y_axis.labels) {
    y_label_width = std::max(y_label_width, text_width(cr, label, kFontSize));
  }
  const double top = options.title.empty() ? 16 : 16 + kTitleSize + 12;
  const double bottom = 10 + kFontSize + 10 + (options.x_label.empty() ? 0 : kFontSize + 10);
  const double left = 12 + (options.y_label.empty() ? 0 : kFontSize + 10) + y_label_width + 8;
  const double right =
      16 + (x_axis.labels.empty() ? 0 : text_width(cr, x_axis.labels.back(), kFontSize) / 2);
  const Rect plot{std::round(left), std::round(top), std::max(left + 40, width - right),
                  std::max(top + 40, height - bottom)};
  auto to_x = [&](double x) { return plot.x0 + x_axis.fraction(x) * (plot.x1 - plot.x0); };
  auto to_y = [&](double y) { return plot.y1 - y_axis.fraction(y) * (plot.y1 - plot.y0); };

  // Grid, ticks and their labels, the frame.
  for (size_t i = 0; i < x_axis.ticks.size(); ++i) {
    const double x = to_x(x_axis.ticks[i]);
    hairline(cr, x, plot.y0, x, plot.y1, kGrid);
    hairline(cr, x, plot.y1, x, plot.y1 + 4, kFrame);
    const std::string& label = x_axis.labels[i];
    show_text(cr, x - text_width(cr, label, kFontSize) / 2, plot.y1 + 8 + kFontSize, label,
              kFontSize);
  }
  for (size_t i = 0; i < y_axis.ticks.size(); ++i) {
    const double y = to_y(y_axis.ticks[i]);
    hairline(cr, plot.x0, y, plot.x1, y, kGrid);
    hairline(cr, plot.x0 - 4, y, plot.x0, y, kFrame);
    const std::string& label = y_axis.labels[i];
    show_text(cr, plot.x0 - 8 - text_width(cr, label, kFontSize), y + kFontSize * 0.35, label,
              kFontSize);
  }
  set_color(cr, kFrame);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, std::floor(plot.x0) + 0.5, std::floor(plot.y0) + 0.5,
                  std::floor(plot.x1) - std::floor(plot.x0),
                  std::floor(plot.y1) - std::floor(plot.y0));
  cairo_stroke(cr);
  if (!options.title.empty()) {
    show_text(cr, (width - text_width(cr, options.title, kTitleSize)) / 2, 12 + kTitleSize,
              options.title, kTitleSize);
  }
  if (!options.x_label.empty()) {
    show_text(cr, (plot.x0 + plot.x1 - text_width(cr, options.x_label, kFontSize)) / 2, height - 10,
              options.x_label, kFontSize);
  }
  if (!options.y_label.empty()) {
    cairo_save(cr);
    cairo_translate(cr, 12 + kFontSize,
                    (plot.y0 + plot.y1 + text_width(cr, options.y_label, kFontSize)) / 2);
    cairo_rotate(cr, -M_PI / 2);  // read bottom to top
    show_text(cr, 0, 0, options.y_label, kFontSize);
    cairo_restore(cr);
  }

  // Lines, broken at points that cannot be drawn (NaN, infinite, y <= 0 on a log axis), and
  // markers, clipped to the inside of the frame.
  cairo_save(cr);
  cairo_rectangle(cr, plot.x0 + 1, plot.y0 + 1, plot.x1 - plot.x0 - 1, plot.y1 - plot.y0 - 1);
  cairo_clip(cr);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    if (!s.lines) continue;
    bool open = false;
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (!drawable(s.x[k], s.y[k], log_y)) {
        open = false;
        continue;
      }
      if (open) {
        cairo_line_to(cr, to_x(s.x[k]), to_y(s.y[k]));
      } else {
        cairo_move_to(cr, to_x(s.x[k]), to_y(s.y[k]));
        if (s.x.size() == 1) cairo_close_path(cr);  // a lone point: a round dot
        open = true;
      }
    }
    set_color(cr, plot_series_color(i));
    cairo_set_line_width(cr, s.x.size() == 1 ? 3.0 : 2.0);
    cairo_stroke(cr);
  }
  for (size_t i = 0; i < series.size(); ++i) {
    const PlotSeries& s = series[i];
    if (!s.markers) continue;
    set_color(cr, plot_series_color(i));
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (!drawable(s.x[k], s.y[k], log_y)) continue;
      cairo_new_sub_path(cr);
      cairo_arc(cr, to_x(s.x[k]), to_y(s.y[k]), 3.5, 0, 2 * M_PI);
    }
    cairo_fill(cr);
  }
  cairo_restore(cr);
  // Point labels, outside the clip so that labels at the edge still show.
  for (const PlotSeries& s : series) {
    if (!s.markers || !s.point_labels) continue;
    for (size_t k = 0; k < s.x.size(); ++k) {
      if (!drawable(s.x[k], s.y[k], log_y) || s.labels[k].empty()) continue;
      const double px = to_x(s.x[k]), py = to_y(s.y[k]);
      const double w = text_width(cr, s.labels[k], kFontSize);
      const double tx = px + 7 + w < width ? px + 7 : px - 7 - w;  // left of the point at the edge
      show_text(cr, tx, py - 5, s.labels[k], kFontSize);
    }
  }

  // Legend: top right inside the plot, where falling loss curves leave room.
  std::vector<size_t> listed;
  double legend_text = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    if (series[i].label.empty()) continue;
    listed.push_back(i);
    legend_text = std::max(legend_text, text_width(cr, series[i].label, kFontSize));
  }
  if (!listed.empty()) {
    const double row = kFontSize + 6, sample = 24;
    const double box_w = std::ceil(8 + sample + 6 + legend_text + 8),
                 box_h = 6 + row * static_cast<double>(listed.size());
    const Rect box{std::floor(plot.x1 - 10 - box_w), std::floor(plot.y0 + 10),
                   std::floor(plot.x1 - 10), std::floor(plot.y0 + 10 + box_h)};
    cairo_rectangle(cr, box.x0 + 0.5, box.y0 + 0.5, box.x1 - box.x0, box.y1 - box.y0);
    set_color(cr, 0xffffff);
    cairo_fill_preserve(cr);
    set_color(cr, kLegendEdge);
    cairo_set_line_width(cr, 1.0);
    cairo_stroke(cr);
    for (size_t n = 0; n < listed.size(); ++n) {
      const PlotSeries& s = series[listed[n]];
      const double mid = box.y0 + 3 + row * (static_cast<double>(n) + 0.5);
      set_color(cr, plot_series_color(listed[n]));
      if (s.lines || !s.markers) {
        cairo_set_line_width(cr, 2.0);
        cairo_move_to(cr, box.x0 + 8, mid);
        cairo_line_to(cr, box.x0 + 8 + sample, mid);
        cairo_stroke(cr);
      }
      if (s.markers) {
        cairo_arc(cr, box.x0 + 8 + sample / 2, mid, 3.5, 0, 2 * M_PI);
        cairo_fill(cr);
      }
      show_text(cr, box.x0 + 8 + sample + 6, mid + kFontSize * 0.35, s.label, kFontSize);
    }
  }

  cairo_surface_flush(surface.get());
  std::string png;
  const cairo_status_t status = cairo_surface_write_to_png_stream(surface.get(), append_png, &png);
  if (status != CAIRO_STATUS_SUCCESS) {
    throw Error(
        str_cat(path, ": PNG encoding failed (cairo: ", cairo_status_to_string(status), ")"));
  }
  write_file_atomically(path, png);
}

}  // namespace headroom

// Line and scatter plots drawn with cairo (Debian's libcairo2-dev) and written as PNG: the loss
// curve of `headroom train` and the memory / step-time trade-off of bench/memory_tradeoff.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace headroom {

struct PlotSeries {
  std::string label;  // shown in the legend; empty: not listed
  std::vector<double> x = {};
  std::vector<double> y = {};  // same length as x; points with a NaN or infinite coordinate (or
                               // y <= 0 with log_y) are skipped and break the line
  bool lines = true;           // join the points with lines
  bool markers = false;        // draw a marker at each point
  bool point_labels = false;   // with markers: write labels[i] beside point i
  std::vector<std::string> labels = {};
};

struct PlotOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  int width = 960;
  int height = 600;
  bool log_y = false;
};

// The colour of series `index` as 0xRRGGBB: matplotlib's tab10 palette, repeating after 10.
uint32_t plot_series_color(size_t index);

// Renders `series` into an RGB PNG at `path` (written to a temporary file and renamed). Axes
// with 1-2-5 ticks (1, 2, 5 x 10^k on a log y axis) and numeric labels, a grid, a legend of the
// labelled series (top right), the title and axis labels in the system's sans-serif font (UTF-8),
// anti-aliased 2-pixel lines. ValueError naming the path for no series, a series
// without points, x and y (or point labels) of different lengths, no drawable point, or a size
// outside 160x120 .. 8192x8192; Error naming the path when it cannot be written.
void write_plot_png(const std::string& path, const std::vector<PlotSeries>& series,
                    const PlotOptions& options);

}  // namespace headroom

// Line and scatter plots written as PNG (libpng): the loss curve of `headroom train` and the
// memory / step-time trade-off of bench/memory_tradeoff.
#pragma once

#include <string>
#include <vector>

namespace headroom {

struct PlotSeries {
  std::string label;       // shown in the legend; empty: not listed
  std::vector<double> x;
  std::vector<double> y;   // same length as x; NaN points are skipped
  bool lines = true;       // join the points with lines
  bool markers = false;    // draw a marker at each point
  bool point_labels = false;  // with markers: write labels[i] beside point i
  std::vector<std::string> labels;
};

struct PlotOptions {
  std::string title;
  std::string x_label;
  std::string y_label;
  int width = 960;
  int height = 600;
  bool log_y = false;
};

// Renders `series` into an RGB PNG at `path` (written to a temporary file and renamed). Axes
// with ticks and numeric labels, a legend, the title. ValueError for empty or mismatched series,
// Error naming the path when it cannot be written.
void write_plot_png(const std::string& path, const std::vector<PlotSeries>& series,
                    const PlotOptions& options);

}  // namespace headroom

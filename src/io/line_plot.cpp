// Placeholder until the PNG plot lands (issue 6): refuses to draw.
#include "io/line_plot.h"

#include "core/error.h"

namespace headroom {

void write_plot_png(const std::string& path, const std::vector<PlotSeries>&, const PlotOptions&) {
  throw NotImplementedError(str_cat(path, ": PNG plots are not built yet"));
}

}  // namespace headroom

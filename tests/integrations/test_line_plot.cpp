// write_plot_png (cairo): the file decodes with libpng as an RGB image of the asked size, a known
// line is drawn in its series colour, and bad input or an unwritable path is refused by name;
// the loss plot draws the training curve where its losses are.
#include <gtest/gtest.h>
#include <png.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/io_test_helpers.h"
#include "integrations/line_plot.h"
#include "integrations/loss_plot_callback.h"

namespace headroom {
namespace {

using io_test::expect_error;
using io_test::TempDir;

struct Image {
  uint32_t width = 0, height = 0, format = 0;
  std::vector<uint8_t> rgb;

  uint32_t at(uint32_t x, uint32_t y) const {
    const uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
    return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
  }
};

// Decodes with libpng's simplified API; `format` is the file's own format.
Image read_png(const std::string& path) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  Image out;
  if (!png_image_begin_read_from_file(&image, path.c_str())) {
    ADD_FAILURE() << path << ": " << image.message;
    return out;
  }
  out.width = image.width;
  out.height = image.height;
  out.format = image.format;
  image.format = PNG_FORMAT_RGB;
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr)) {
    ADD_FAILURE() << path << ": " << image.message;
  }
  return out;
}

// With HEADROOM_KEEP_PLOTS=DIR the plots are copied there, to be looked at.
void keep_for_viewing(const std::string& path) {
  if (const char* dir = std::getenv("HEADROOM_KEEP_PLOTS")) {
    std::filesystem::copy_file(path,
                               std::filesystem::path(dir) / std::filesystem::path(path).filename(),
                               std::filesystem::copy_options::overwrite_existing);
  }
}

PlotSeries series(std::string label, std::vector<double> x, std::vector<double> y) {
  PlotSeries s;
  s.label = std::move(label);
  s.x = std::move(x);
  s.y = std::move(y);
  return s;
}

TEST(LinePlot, DecodesAsRgbOfTheAskedSize) {
  TempDir dir;
  const std::string path = dir.file("loss.png");
  std::vector<double> steps, loss;
  for (int i = 0; i <= 200; ++i) {
    steps.push_back(i * 5);
    loss.push_back(2.0 + 9.0 * std::exp(-i / 30.0) + 0.1 * std::sin(i * 0.7));
  }
  PlotOptions options;
  options.title = "headroom train";
  options.x_label = "step";
  options.y_label = "loss";
  options.width = 640;
  options.height = 400;
  write_plot_png(path, {series("train", steps, loss)}, options);
  keep_for_viewing(path);
  const Image image = read_png(path);
  EXPECT_EQ(image.width, 640u);
  EXPECT_EQ(image.height, 400u);
  EXPECT_EQ(image.format,
            static_cast<uint32_t>(PNG_FORMAT_RGB));  // colour type RGB, 8 bits, no alpha
  EXPECT_EQ(image.at(0, 0), 0xffffffu);              // white background
  // No temporary file is left beside it.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.str()), {}), 1);
}

TEST(LinePlot, AKnownLineHasItsSeriesColour) {
  TempDir dir;
  const std::string path = dir.file("lines.png");
  // Series 0 runs flat at y = 1 through the middle; series 1 sets the range 0 .. 2 at the sides.
  PlotSeries flat = series("flat", {0, 10}, {1, 1});
  PlotSeries bounds = series("", {0, 10}, {0, 2});
  bounds.lines = false;
  bounds.markers = true;
  PlotOptions options;
  options.width = 400;
  options.height = 300;
  write_plot_png(path, {flat, bounds}, options);
  keep_for_viewing(path);
  const Image image = read_png(path);
  ASSERT_EQ(image.width, 400u);
  std::vector<uint32_t> rows;
  for (uint32_t y = 0; y < image.height; ++y) {
    if (image.at(image.width / 2, y) == plot_series_color(0)) rows.push_back(y);
  }
  ASSERT_FALSE(rows.empty()) << "no pixel of series 0's colour in the middle column";
  for (uint32_t y : rows) {
    EXPECT_GT(y, image.height * 3 / 10);
    EXPECT_LT(y, image.height * 7 / 10);
  }
  EXPECT_LE(rows.back() - rows.front(), 2u);  // a 2-pixel line
  // The markers of series 1 are drawn in its colour.
  int marker_pixels = 0;
  for (uint32_t y = 0; y < image.height; ++y) {
    for (uint32_t x = 0; x < image.width; ++x) {
      marker_pixels += image.at(x, y) == plot_series_color(1);
    }
  }
  EXPECT_GT(marker_pixels, 10);
}

TEST(LinePlot, LogAxisMarkersAndPointLabels) {
  TempDir dir;
  const std::string path = dir.file("tradeoff.png");
  PlotSeries points = series("configurations", {1.2, 2.5, 4.1, 7.9}, {0.31, 0.22, 0.18, 0.17});
  points.lines = false;
  points.markers = true;
  points.point_labels = true;
  points.labels = {"ckpt full", "ckpt every_2", "bf16", "fp32"};
  PlotSeries nan_gap =
      series("with a gap", {1, 2, 3, 4, 5, 6}, {0.5, 0.45, std::nan(""), 0.3, 0.28, -1});
  PlotOptions options;
  options.title = "memory vs time";
  options.x_label = "peak GiB";
  options.y_label = "s / step";
  options.log_y = true;
  write_plot_png(path, {points, nan_gap}, options);
  keep_for_viewing(path);
  const Image image = read_png(path);
  EXPECT_EQ(image.width, 960u);
  EXPECT_EQ(image.height, 600u);
}

TEST(LinePlot, BadInputIsAValueError) {
  TempDir dir;
  const std::string path = dir.file("bad.png");
  expect_error<ValueError>([&] { write_plot_png(path, {}, {}); }, {path, "at least one series"});
  expect_error<ValueError>([&] { write_plot_png(path, {series("empty", {}, {})}, {}); },
                           {path, "series 'empty' has no points"});
  expect_error<ValueError>(
      [&] {
        write_plot_png(path, {series("", {1, 2}, {1})}, {});
      },
      {path, "series 0", "2 x values and 1 y values"});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect_error<ValueError>(
      [&] {
        write_plot_png(path, {series("a", {1, 2}, {nan, nan})}, {});
      },
      {path, "no point"});
  PlotOptions log_y;
  log_y.log_y = true;
  expect_error<ValueError>(
      [&] {
        write_plot_png(path, {series("a", {1, 2}, {0, -1})}, log_y);
      },
      {path, "positive y"});
  PlotOptions tiny;
  tiny.width = 10;
  expect_error<ValueError>([&] { write_plot_png(path, {series("a", {1}, {1})}, tiny); },
                           {path, "10x600"});
  PlotSeries labelled = series("a", {1, 2}, {1, 2});
  labelled.point_labels = true;
  labelled.labels = {"one"};
  expect_error<ValueError>([&] { write_plot_png(path, {labelled}, {}); },
                           {"1 point labels for 2 points"});
  EXPECT_FALSE(std::filesystem::exists(path));
}

// A falling training loss and two eval losses: the train colour is high on the left and low on
// the right of the plot (away from the legend at the top right), the eval colour is drawn.
TEST(LossPlot, TheCurveIsWhereTheLossesAre) {
  TempDir dir;
  const std::string path = dir.file("loss.png");
  nlohmann::ordered_json history = nlohmann::ordered_json::array();
  for (int step = 10; step <= 100; step += 10) {
    history.push_back({{"loss", 4.0 - 3.0 * (step - 10) / 90.0}, {"step", step}});
    if (step % 50 == 0) history.push_back({{"eval_loss", step == 50 ? 3.0 : 1.5}, {"step", step}});
  }
  history.push_back({{"loss", nullptr}, {"step", 110}});  // a NaN loss: left out
  write_loss_plot(path, history, "gpt2-tiny");
  keep_for_viewing(path);
  const Image image = read_png(path);
  ASSERT_EQ(image.width, 960u);
  ASSERT_EQ(image.height, 600u);
  auto mean_row = [&](uint32_t color, uint32_t x0, uint32_t x1) {
    double sum = 0;
    int count = 0;
    for (uint32_t y = 0; y < image.height; ++y) {
      for (uint32_t x = x0; x < x1; ++x) {
        if (image.at(x, y) == color) {
          sum += y;
          ++count;
        }
      }
    }
    return count > 0 ? sum / count : -1.0;
  };
  const double left = mean_row(plot_series_color(0), 0, image.width / 5);
  const double right = mean_row(plot_series_color(0), image.width * 3 / 5, image.width * 4 / 5);
  ASSERT_GE(left, 0) << "no train-coloured pixel on the left";
  ASSERT_GE(right, 0) << "no train-coloured pixel at 60-80% of the width";
  EXPECT_LT(left, image.height * 0.4);
  EXPECT_GT(right, image.height * 0.5);
  EXPECT_GE(mean_row(plot_series_color(1), 0, image.width), 0) << "no eval-coloured pixel";

  // No loss at all: no plot.
  const std::string none = dir.file("none.png");
  write_loss_plot(none, nlohmann::ordered_json::array({{{"eval_loss", nullptr}, {"step", 1}}}),
                  "m");
  EXPECT_FALSE(std::filesystem::exists(none));
}

TEST(LinePlot, UnwritablePathIsNamed) {
  TempDir dir;
  const std::string path = dir.file("no_such_dir/plot.png");
  expect_error<Error>([&] { write_plot_png(path, {series("a", {0, 1}, {0, 1})}, {}); }, {path});
}

}  // namespace
}  // namespace headroom

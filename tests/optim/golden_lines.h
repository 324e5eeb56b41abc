// Reading the optim fixtures (tests/fixtures/optim/*_golden.txt): lines of a keyword and
// whitespace-separated fields, as the generators in tools/ write them.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/shape.h"

namespace headroom::optim_test {

using GoldenLineReader = std::function<void(const std::string& keyword, std::istringstream& rest)>;

// Calls fn(keyword, rest of the line) for each line of the fixture tests/fixtures/`relative`
// ("profile/schedule_golden.txt") but comments and blank lines; a test failure when it cannot
// be read.
inline void for_each_fixture_line(const std::string& relative, const GoldenLineReader& fn) {
  const std::string path = std::string(HEADROOM_FIXTURES_DIR) + "/" + relative;
  std::ifstream file(path);
  EXPECT_TRUE(file) << "cannot open " << path;
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string keyword;
    in >> keyword;
    fn(keyword, in);
  }
}

// for_each_fixture_line of tests/fixtures/optim/`name`.
inline void for_each_golden_line(const std::string& name, const GoldenLineReader& fn) {
  for_each_fixture_line("optim/" + name, fn);
}

// The rest of the line as numbers ("inf" included), read as doubles without rounding.
inline std::vector<double> read_numbers(std::istringstream& in) {
  std::vector<double> values;
  std::string word;
  while (in >> word) values.push_back(std::strtod(word.c_str(), nullptr));
  return values;
}

// The rest of the line as floats, each parsed straight to the nearest float.
inline std::vector<float> read_floats(std::istream& in) {
  std::vector<float> values;
  std::string word;
  while (in >> word) values.push_back(std::strtof(word.c_str(), nullptr));
  return values;
}

// The rest of a "param <name> <ndim> <dims...>" line.
inline std::pair<std::string, Shape> read_param(std::istream& in) {
  std::string name;
  int ndim = 0;
  in >> name >> ndim;
  std::vector<int64_t> dims(ndim);
  for (int64_t& d : dims) in >> d;
  return {name, Shape(dims)};
}

}  // namespace headroom::optim_test

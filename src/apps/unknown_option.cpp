// Unknown options and stray values, named with a suggestion (see unknown_option.h).
#include "apps/unknown_option.h"

#include <CLI/CLI.hpp>

#include <algorithm>

#include "core/error.h"
#include "core/json_file.h"

namespace headroom {

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, name.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    // Lengths further apart than the distance allowed cannot be near (and a 10 MB name would
    // cost a 10 MB row per candidate).
    const size_t gap = name.size() > candidate.size() ? name.size() - candidate.size()
                                                      : candidate.size() - name.size();
    if (gap >= best_distance) continue;
    const size_t d = edit_distance(name, candidate);
    if (d < best_distance) {
      best = candidate;
      best_distance = d;
    }
  }
  return best;
}

std::string unexpected_arguments_message(const CLI::App& command,
                                         const std::vector<std::string>& extras) {
  // An unknown option first: the values after it were meant for it.
  for (const std::string& extra : extras) {
    if (extra.size() < 2 || extra[0] != '-') continue;
    const std::string name = extra.substr(0, extra.find('='));
    std::vector<std::string> candidates;
    for (const CLI::Option* option : command.get_options()) {
      for (const std::string& long_name : option->get_lnames())
        candidates.push_back("--" + long_name);
    }
    const std::string suggestion = nearest_name(name, candidates);
    return suggestion.empty()
               ? str_cat("unknown option ", shortened(name))
               : str_cat("unknown option ", shortened(name), "; did you mean ", suggestion, "?");
  }
  std::string values;
  for (const std::string& extra : extras) {
    values += str_cat(values.empty() ? "'" : " '", shortened(extra), "'");
  }
  return str_cat("unexpected argument", extras.size() > 1 ? "s " : " ", values,
                 ": each option takes at most one value (--name value); quote a value with spaces");
}

}  // namespace headroom

// The one-line error for arguments a subcommand does not take: an unknown option with the
// nearest option name ("unknown option --memory_limt; did you mean --memory_limit?"), or a value
// that follows no option. Replaces CLI11's "The following arguments were not expected: ...".
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace headroom {

// `extras`: the arguments CLI11 left over (App::remaining), in command-line order; `command`: the
// (sub)command whose options are the candidates.
std::string unexpected_arguments_message(const CLI::App& command,
                                         const std::vector<std::string>& extras);

// The candidate nearest to `name` by edit distance, or "" when none is close enough to be a typo
// (at most 2 edits, or a third of the name's length for long names).
std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates);

}  // namespace headroom

// `headroom train`: TrainingArguments from flags (--snake_case or --kebab-case, HF's names and
// defaults) and an optional --config file (TOML, JSON or YAML), flags winning over the file;
// checked, then handed to run_training.
#pragma once

#include <string>
#include <vector>

#include "train/training_arguments.h"

namespace CLI {
class App;
}

namespace headroom {

// Registers the subcommand and one option per TrainingArguments field on `app`.
CLI::App* add_train_command(CLI::App& app);
// The parsed subcommand's arguments: defaults, then --config, then flags; validated.
TrainingArguments train_arguments_from(const CLI::App& train);
int run_train_command(const CLI::App& train);

// The arguments that follow `headroom train` parsed as the command does, for tests and tools.
// ValueError for an unknown option or a bad value, with the command's message.
TrainingArguments parse_train_arguments(const std::vector<std::string>& args);

}  // namespace headroom

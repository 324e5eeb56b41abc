// `headroom train`: TrainingArguments from flags (--snake_case or --kebab-case, HF's names and
// defaults) and an optional --config file (TOML, JSON or YAML), flags winning over the file;
// checked, then handed to run_training.
#pragma once

#include <string>
#include <vector>

#include "apps/train_options.h"
#include "train/training_arguments.h"

namespace CLI {
class App;
}

namespace headroom {

// Registers the subcommand and one option per TrainingArguments field on `app`.
CLI::App* add_train_command(CLI::App& app);
// Which options --help lists: all of them (train), or those a dry run reads (plan; the others
// are still accepted, so that a train command line plans as it is, and named in the footer).
enum class TrainingOptionsHelp { all, read_by_plan };
// --config and one option per TrainingArguments field, on `command` (train, plan).
void add_training_options(CLI::App& command, TrainingOptionsHelp help = TrainingOptionsHelp::all);
// The parsed subcommand's arguments: defaults, then --config, then flags; validated (the data
// file too, unless `data` says it is not read).
TrainingArguments train_arguments_from(const CLI::App& train, DataCheck data = DataCheck::required);
int run_train_command(const CLI::App& train);

// The arguments that follow `headroom train` parsed as the command does, for tests and tools.
// ValueError for an unknown option or a bad value, with the command's message.
TrainingArguments parse_train_arguments(const std::vector<std::string>& args);

}  // namespace headroom

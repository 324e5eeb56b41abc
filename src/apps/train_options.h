// The options of `headroom train`: one row per TrainingArguments field (its HF name, help line and
// type), shared by the command line, config files and --help; and the checks on a full set.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/config_file.h"
#include "train/training_arguments.h"

namespace headroom {

using TrainingField = std::variant<std::string TrainingArguments::*, int64_t TrainingArguments::*,
                                   double TrainingArguments::*, bool TrainingArguments::*,
                                   std::optional<int64_t> TrainingArguments::*,
                                   std::optional<bool> TrainingArguments::*>;

struct TrainOption {
  const char* name;   // HF's snake_case name; the kebab-case spelling is accepted too
  const char* group;  // the --help section
  std::string help;
  TrainingField field;
  const char* alias = nullptr;  // another name users know it by (TRL's), or null
};

// Every TrainingArguments field, in the order --help lists them.
const std::vector<TrainOption>& train_options();
// The option spelled `name` in snake_case or kebab-case (no leading dashes); null if none.
const TrainOption* find_train_option(std::string_view name);
std::string kebab_case(std::string_view snake_name);

// Whether a dry run (`headroom plan`) reads the option: false for the data, files, schedule,
// logging, checkpoints, the sample and profiling, which change no byte of the plan.
bool read_by_plan(const TrainOption& option);

// Every option's value in `args`, typed (an unset optional is null), in the table's order: the
// arguments as HF's TrainingArguments.to_json_string() gives them (TensorBoard's "args" text).
nlohmann::ordered_json training_arguments_json(const TrainingArguments& args);

// "INT", "FLOAT", "BOOL", "TEXT" for --help.
const char* option_type_name(const TrainOption& option);
// The option's value in `args` as text ("8", "5e-05", "false"); "" for an unset optional.
std::string option_value_text(const TrainingArguments& args, const TrainOption& option);

// `headroom train` with every option whose value in `args` differs from its default, in the
// table's order (a true flag bare, text quoted when it has a space or quote); `device` is left
// out (plans set it to the card planned for).
std::string train_command_line(const TrainingArguments& args);

// Where each option's value came from ("--max_steps", "run.toml: max_steps"), so that a check
// on the merged arguments names what the user wrote; options left at their default are absent.
using OptionOrigins = std::map<std::string, std::string>;

// Sets the option from command-line text (an empty text for a bare boolean flag means true).
void set_option_from_text(TrainingArguments& args, const TrainOption& option, std::string_view text,
                          const std::string& origin);
// Sets the option from a config file value; ValueError naming `origin`, the expected type and the
// value for a value of another type (integers are accepted for float options, null for optional
// ones).
void set_option_from_config(TrainingArguments& args, const TrainOption& option,
                            const ConfigValue& value, const std::string& origin);

// Applies `path`'s entries to `args` and records their origins. ValueError naming the file and
// the key for an unknown key or one given twice (e.g. as bf16 and as bf16's kebab spelling).
void apply_config_file(TrainingArguments& args, const std::string& path, OptionOrigins& origins);

// Whether the command reads --data (train) or not (plan: its batches are synthetic).
enum class DataCheck { required, not_read };

// The checks HF's TrainingArguments.__post_init__ and the data arguments make, plus headroom's
// names: positive batch sizes and steps, known optim / lr_scheduler_type / precision /
// strategies, bf16 and fp16 not both, an existing --data (unless `data` is not_read). ValueError
// naming the option as its origin says, with the value and the limit.
void validate_training_arguments(const TrainingArguments& args, const OptionOrigins& origins = {},
                                 DataCheck data = DataCheck::required);

}  // namespace headroom

// `headroom train` on CLI11: every option is registered as text and converted by train_options,
// so flags and config files share one set of conversions and error messages.
#include "apps/train_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "apps/train_options.h"
#include "apps/unknown_option.h"
#include "core/error.h"
#include "dist/launch_environment.h"
#include "integrations/loss_plot_callback.h"
#include "integrations/report_to.h"
#include "integrations/tensorboard_callback.h"
#include "memory/alloc_config.h"
#include "memory/device_memory.h"
#include "plan/machine_fit.h"
#include "profile/profiler_callback.h"
#include "train/model_source.h"
#include "train/trainer.h"

namespace headroom {
namespace {

std::string help_default(const TrainOption& option) {
  std::string text = option_value_text(TrainingArguments{}, option);
  if (text == "\n") return "\\n";  // sample_prompt's newline, shown as Python would write it
  return text;
}

}  // namespace

void add_training_options(CLI::App& train, TrainingOptionsHelp help) {
  std::string unlisted;
  train.add_option("--config", "a TOML, JSON or YAML file of option = value; flags override it")
      ->type_name("FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (const TrainOption& option : train_options()) {
    std::string names = str_cat("--", option.name);
    if (const std::string kebab = kebab_case(option.name); kebab != option.name) {
      names += ",--" + kebab;
    }
    if (option.alias) names += str_cat(",--", option.alias, ",--", kebab_case(option.alias));
    const bool listed = help == TrainingOptionsHelp::all || read_by_plan(option);
    if (!listed) unlisted += str_cat(unlisted.empty() ? "" : ", ", "--", option.name);
    // CLI11 leaves options of the empty group out of --help.
    CLI::Option* added = train.add_option(names, option.help)
                             ->group(listed ? option.group : "")
                             ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    const std::string shown = help_default(option);
    if (std::holds_alternative<bool TrainingArguments::*>(option.field) ||
        std::holds_alternative<std::optional<bool> TrainingArguments::*>(option.field)) {
      // HF's booleans: `--bf16` alone, or `--bf16 true|false|1|0|yes|no`.
      added->expected(0, 1)->option_text(str_cat("[BOOL]=", shown));
    } else {
      added->type_name(option_type_name(option));
      if (!shown.empty()) added->option_text(str_cat(option_type_name(option), "=", shown));
    }
  }
  std::string footer =
      "Every option is also accepted in kebab-case in config files (bf16 = true, "
      "per-device-train-batch-size = 4).\nBooleans: --bf16 alone means true; --bf16 false, 0, no "
      "turn it off.";
  if (!unlisted.empty()) {
    footer += str_cat(
        "\nAccepted and ignored, as the dry run does not read them (so that a train "
        "command line plans as it is): ",
        unlisted, ".");
  }
  train.footer(footer);
}

CLI::App* add_train_command(CLI::App& app) {
  CLI::App* train = app.add_subcommand(
      "train", "Train or fine-tune a language model (options as HF TrainingArguments)");
  add_training_options(*train);
  return train;
}

TrainingArguments train_arguments_from(const CLI::App& train, DataCheck data) {
  TrainingArguments args;
  OptionOrigins origins;
  if (const CLI::Option* config = train.get_option("--config"); config->count() > 0) {
    apply_config_file(args, config->results().back(), origins);
  }
  for (const TrainOption& option : train_options()) {
    const CLI::Option* flag = train.get_option(str_cat("--", option.name));
    if (flag->count() == 0) continue;
    const std::string origin = str_cat("--", option.name);
    // A bare boolean flag leaves no result: it means true.
    const std::string text = flag->results().empty() ? std::string() : flag->results().back();
    set_option_from_text(args, option, text, origin);
    origins[option.name] = origin;
  }
  validate_training_arguments(args, origins, data);
  return args;
}

int run_train_command(const CLI::App& train) {
  TrainingArguments args = train_arguments_from(train);
  if (args.eval_steps && args.eval_strategy == "no") {
    std::fprintf(stderr, "headroom: warning: eval_steps is ignored with eval_strategy no\n");
  }
  if (!args.memory_limit.empty()) {
    set_memory_limit(resolve_device(args.device),
                     parse_byte_size(args.memory_limit, "--memory_limit"));
  }
  if (args.expandable_segments)
    caching_allocator(resolve_device(args.device)).set_expandable_segments(true);
  // Note [A run that cannot fit is refused before it allocates]; one process (a rank's share
  // needs the world's dry run).
  if (!launch_environment().distributed()) {
    if (args.auto_find_batch_size) {
      std::string why;
      args = find_batch_size(args, &why);
      std::printf("%s\n", why.c_str());
    }
    check_run_fits_the_machine(args);
  } else if (args.auto_find_batch_size) {
    std::fprintf(stderr,
                 "headroom: warning: auto_find_batch_size is not applied under mpirun (a rank's "
                 "batch needs the world's dry run); the given batch trains\n");
  }
  std::vector<std::shared_ptr<TrainerCallback>> callbacks;
  callbacks.push_back(std::make_shared<LossPlotCallback>());
  if (args.profile) callbacks.push_back(std::make_shared<ProfilerCallback>(args));
  if (parse_report_to(args.report_to).tensorboard) {
    callbacks.push_back(std::make_shared<TensorBoardCallback>(
        args.logging_dir.empty() ? default_logging_dir(args.output_dir) : args.logging_dir,
        training_arguments_json(args).dump(2)));
  }
  return run_training(args, std::move(callbacks), training_arguments_json(args));
}

TrainingArguments parse_train_arguments(const std::vector<std::string>& args) {
  CLI::App train{"headroom train", "train"};
  add_training_options(train);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    train.parse(reversed);
  } catch (const CLI::ExtrasError&) {
    throw ValueError(unexpected_arguments_message(train, train.remaining()));
  } catch (const CLI::ParseError& e) {
    throw ValueError(e.what());
  }
  return train_arguments_from(train);
}

}  // namespace headroom

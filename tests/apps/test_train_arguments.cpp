// `headroom train` option parsing without running it: snake and kebab spellings, HF booleans,
// config files in TOML, JSON and YAML, flags over config, and the checks with their messages.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "apps/train_command.h"
#include "apps/train_options.h"
#include "train/trainer.h"
#include "io/io_test_helpers.h"

namespace headroom {
namespace {

using io_test::expect_error;
using io_test::TempDir;
using io_test::write_bytes;

class TrainArguments : public ::testing::Test {
 protected:
  void SetUp() override { write_bytes(data_, "hello world\n"); }

  // The arguments after `headroom train`, with a valid --data first.
  TrainingArguments parse(std::vector<std::string> args) {
    args.insert(args.begin(), {"--data", data_});
    return parse_train_arguments(args);
  }
  void expect_invalid(std::vector<std::string> args, std::initializer_list<std::string> pieces) {
    expect_error<ValueError>([&] { parse(args); }, pieces);
  }

  TempDir dir_;
  std::string data_ = dir_.file("data.txt");
};

TEST_F(TrainArguments, DefaultsAreHfTrainingArguments) {
  const TrainingArguments args = parse({});
  const TrainingArguments defaults;
  for (const TrainOption& option : train_options()) {
    if (std::string(option.name) == "data") continue;
    EXPECT_EQ(option_value_text(args, option), option_value_text(defaults, option)) << option.name;
  }
  EXPECT_EQ(args.data, data_);
  EXPECT_EQ(args.per_device_train_batch_size, 8);
  EXPECT_EQ(args.learning_rate, 5e-5);
  EXPECT_EQ(args.lr_scheduler_type, "linear");
  EXPECT_FALSE(args.eval_steps.has_value());
}

TEST_F(TrainArguments, SnakeAndKebabCase) {
  const TrainingArguments snake =
      parse({"--per_device_train_batch_size", "4", "--learning_rate", "1e-3", "--lr_scheduler_type",
             "cosine", "--eval_steps=50"});
  const TrainingArguments kebab =
      parse({"--per-device-train-batch-size", "4", "--learning-rate=1e-3", "--lr-scheduler-type",
             "cosine", "--eval-steps", "50"});
  for (const TrainingArguments& args : {snake, kebab}) {
    EXPECT_EQ(args.per_device_train_batch_size, 4);
    EXPECT_EQ(args.learning_rate, 1e-3);
    EXPECT_EQ(args.lr_scheduler_type, "cosine");
    EXPECT_EQ(args.eval_steps, 50);
  }
}

TEST_F(TrainArguments, EveryOptionHasBothSpellings) {
  for (const TrainOption& option : train_options()) {
    EXPECT_EQ(find_train_option(option.name), &option);
    EXPECT_EQ(find_train_option(kebab_case(option.name)), &option);
  }
  EXPECT_EQ(find_train_option("no_such_option"), nullptr);
}

TEST_F(TrainArguments, BooleansAsHfAcceptsThem) {
  EXPECT_TRUE(parse({"--bf16"}).bf16);
  EXPECT_TRUE(parse({"--bf16", "true"}).bf16);
  EXPECT_TRUE(parse({"--bf16", "1"}).bf16);
  EXPECT_TRUE(parse({"--bf16=yes"}).bf16);
  EXPECT_TRUE(parse({"--bf16", "True"}).bf16);
  EXPECT_FALSE(parse({"--bf16", "false"}).bf16);
  EXPECT_FALSE(parse({"--bf16", "0"}).bf16);
  EXPECT_FALSE(parse({"--bf16=no"}).bf16);
  EXPECT_FALSE(parse({"--dataloader_pin_memory", "false"}).dataloader_pin_memory);
  const TrainingArguments two = parse({"--gradient-checkpointing", "--logging_first_step", "t"});
  EXPECT_TRUE(two.gradient_checkpointing);
  EXPECT_TRUE(two.logging_first_step);
  expect_invalid({"--bf16", "maybe"}, {"--bf16", "'maybe'", "not a boolean"});
}

TEST_F(TrainArguments, LastFlagWins) {
  EXPECT_EQ(parse({"--max_steps", "10", "--max-steps", "20"}).max_steps, 20);
}

TEST_F(TrainArguments, ConfigInEachFormat) {
  const std::string toml = dir_.file("run.toml"), json = dir_.file("run.json"),
                    yaml = dir_.file("run.yaml");
  write_bytes(toml,
              "per_device_train_batch_size = 4\nlearning-rate = 3e-4\nbf16 = true\n"
              "lr_scheduler_type = \"cosine\"\nnum_train_epochs = 2\neval_steps = 25\n"
              "sample_prompt = \"Once\"\n");
  write_bytes(json,
              "{\"per_device_train_batch_size\": 4, \"learning-rate\": 3e-4, \"bf16\": true,\n"
              " \"lr_scheduler_type\": \"cosine\", \"num_train_epochs\": 2, \"eval_steps\": 25,\n"
              " \"sample_prompt\": \"Once\"}\n");
  write_bytes(yaml,
              "# a comment\nper_device_train_batch_size: 4\nlearning-rate: 3e-4\nbf16: true\n"
              "lr_scheduler_type: cosine\nnum_train_epochs: 2\neval_steps: 25\n"
              "sample_prompt: 'Once'\n");
  for (const std::string& config : {toml, json, yaml}) {
    SCOPED_TRACE(config);
    const TrainingArguments args = parse({"--config", config});
    EXPECT_EQ(args.per_device_train_batch_size, 4);
    EXPECT_EQ(args.learning_rate, 3e-4);
    EXPECT_TRUE(args.bf16);
    EXPECT_EQ(args.lr_scheduler_type, "cosine");
    EXPECT_EQ(args.num_train_epochs, 2.0);  // an integer is taken for a float option
    EXPECT_EQ(args.eval_steps, 25);
    EXPECT_EQ(args.sample_prompt, "Once");
  }
}

TEST_F(TrainArguments, FlagsOverrideTheConfig) {
  const std::string config = dir_.file("run.toml");
  write_bytes(config, "per_device_train_batch_size = 4\nbf16 = true\nmax_steps = 100\n");
  const TrainingArguments args =
      parse({"--per-device-train-batch-size", "2", "--config", config, "--bf16", "false"});
  EXPECT_EQ(args.per_device_train_batch_size, 2);
  EXPECT_FALSE(args.bf16);
  EXPECT_EQ(args.max_steps, 100);  // from the file, no flag
}

// pure_bf16 with Kahan-compensated updates is a recipe of its own, chosen by the one option.
TEST_F(TrainArguments, PrecisionTakesEveryRecipesName) {
  for (const char* name : {"fp32", "bf16", "fp16", "pure_bf16", "pure_bf16+kahan"}) {
    EXPECT_EQ(training_precision(parse({"--precision", name})).name(), name);
  }
  const std::string yaml = dir_.file("kahan.yaml"), toml = dir_.file("kahan.toml");
  write_bytes(yaml, "precision: pure_bf16+kahan\n");
  write_bytes(toml, "precision = \"pure_bf16+kahan\"\n");
  for (const std::string& config : {yaml, toml}) {
    const PrecisionRecipe recipe = training_precision(parse({"--config", config}));
    EXPECT_TRUE(recipe.kahan_summation) << config;
    EXPECT_EQ(recipe.param_dtype, DType::bf16) << config;
  }
}

TEST_F(TrainArguments, YamlNullUnsetsAnOptionalInteger) {
  const std::string config = dir_.file("run.yml");
  write_bytes(config, "eval_steps: ~\ndata_seed: 7\n");
  const TrainingArguments args = parse({"--config", config});
  EXPECT_FALSE(args.eval_steps.has_value());
  EXPECT_EQ(args.data_seed, 7);
}

TEST_F(TrainArguments, ConfigErrorsNameTheFileKeyAndValue) {
  const std::string toml = dir_.file("bad.toml");
  write_bytes(toml, "per_device_train_batch_size = 4\nno_such_option = 1\n");
  expect_invalid({"--config", toml}, {toml, "unknown key 'no_such_option'"});

  write_bytes(toml, "per_device_train_batch_size = \"eight\"\n");
  expect_invalid({"--config", toml},
                 {toml, "per_device_train_batch_size", "expected an integer", "'eight'"});

  const std::string json = dir_.file("bad.json");
  write_bytes(json, "{\"bf16\": \"yes\"}");
  expect_invalid({"--config", json}, {json, "bf16", "expected true or false", "'yes'"});
  write_bytes(json, "{\"learning_rate\": [1, 2]}");
  expect_invalid({"--config", json}, {json, "learning_rate", "an array"});
  write_bytes(json, "{\"seed\": 1,}");
  expect_invalid({"--config", json}, {json, "line 1"});
  write_bytes(json, "[1, 2]");
  expect_invalid({"--config", json}, {json, "top level"});

  const std::string yaml = dir_.file("bad.yaml");
  write_bytes(yaml, "max_steps: 1.5\n");
  expect_invalid({"--config", yaml}, {yaml, "max_steps", "expected an integer", "1.5"});
  write_bytes(yaml, "logging-steps: 5\nlogging_steps: 6\n");
  expect_invalid({"--config", yaml}, {yaml, "logging_steps is given twice", "'logging-steps'"});
  write_bytes(yaml, "bf16: true\nbf16: false\n");  // yaml-cpp keeps both
  expect_invalid({"--config", yaml}, {yaml, "bf16 is given twice"});
  write_bytes(yaml, "seed: [1\n");
  expect_invalid({"--config", yaml}, {yaml, ":"});

  // What the libraries throw beyond their syntax errors also names the file (issue 19,
  // defect 11): a number past double's range, keys that are not names.
  write_bytes(json, "{\"learning_rate\": 8e700}");
  expect_invalid({"--config", json}, {json, "8e700"});
  write_bytes(yaml, "{}: 1\n");
  expect_invalid({"--config", yaml}, {yaml, "line 1", "key is a mapping, not an option name"});
  write_bytes(yaml, "[a]: 1\n");
  expect_invalid({"--config", yaml}, {yaml, "key is a sequence"});
  write_bytes(yaml, "seed: *anchor\n");
  expect_invalid({"--config", yaml}, {yaml, "anchor"});
  write_bytes(toml, "learning_rate = 1e400\n");
  expect_invalid({"--config", toml}, {toml});

  expect_invalid({"--config", dir_.file("run.ini")},
                 {"run.ini", "unknown config file type '.ini'"});
  expect_invalid({"--config", dir_.file("missing.toml")}, {"missing.toml", "cannot open"});
}

TEST_F(TrainArguments, ChecksNameTheOptionAndValue) {
  expect_invalid({"--per_device_train_batch_size", "-3"},
                 {"--per_device_train_batch_size", "-3", "not positive"});
  expect_invalid({"--per_device_train_batch_size", "8x"},
                 {"--per_device_train_batch_size", "'8x'", "not an integer"});
  expect_invalid({"--learning_rate", "fast"}, {"--learning_rate", "'fast'", "not a number"});
  expect_invalid({"--lr_scheduler_type", "sawtooth"},
                 {"--lr_scheduler_type", "sawtooth", "cosine"});
  expect_invalid({"--lr_scheduler_type", "reduce_lr_on_plateau"},
                 {"--lr_scheduler_type", "reduce_lr_on_plateau"});
  expect_invalid({"--optim", "adamw_9bit"}, {"--optim", "adamw_9bit", "adamw_torch"});
  expect_invalid({"--precision", "fp12"}, {"--precision", "fp12", "pure_bf16+kahan"});
  expect_invalid({"--precision", "bf16+kahan"}, {"--precision", "bf16+kahan"});
  expect_invalid({"--bf16", "--fp16"}, {"--bf16 and --fp16 are both true"});
  expect_invalid({"--gradient_checkpointing_policy", "every_0"},
                 {"gradient_checkpointing_policy", "every_0"});
  expect_invalid({"--eval_strategy", "epoch"}, {"--eval_strategy", "'epoch'", "no, steps"});
  expect_invalid({"--eval_steps", "0"}, {"--eval_steps", "0", "not positive"});
  expect_invalid({"--max_steps", "0"}, {"--max_steps", "-1"});
  expect_invalid({"--warmup_ratio", "1.5"}, {"--warmup_ratio", "1.5", "[0, 1]"});
  expect_invalid({"--device", "tpu"}, {"--device", "tpu"});
  expect_invalid({"--dataloader_prefetch_factor", "2"},
                 {"--dataloader_prefetch_factor", "dataloader_num_workers"});
  expect_invalid({"--resume_from_checkpoint", dir_.file("nope")},
                 {"--resume_from_checkpoint", "nope"});
  expect_invalid({"--no_such_option", "1"}, {"unknown option --no_such_option"});
  expect_invalid({"--lerning_rate", "1"},
                 {"unknown option --lerning_rate; did you mean --learning_rate?"});
  expect_invalid({"--memory_limit", "lots"}, {"--memory_limit", "'lots' is not a byte size"});
  // A DeepSpeed file that offloads against an explicit --offload_optimizer false: the file won
  // silently (issue 39, item 10). Left out, the option lets the file decide.
  const std::string ds = dir_.file("ds.json");
  write_bytes(ds, R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})");
  expect_invalid({"--deepspeed", ds, "--offload_optimizer", "false"},
                 {"--offload_optimizer", "false, and ", "zero_optimization.offload_optimizer"});
  EXPECT_NO_THROW(parse_train_arguments({"--data", data_, "--deepspeed", ds}));
  EXPECT_NO_THROW(
      parse_train_arguments({"--data", data_, "--deepspeed", ds, "--offload_optimizer", "true"}));
  // A cap of no bytes meant no cap at all (issue 39, item 10).
  expect_invalid({"--memory_limit", "0"}, {"--memory_limit", "'0' is no memory at all"});
  // Noise beyond fp32's range saved a NaN model.
  expect_invalid({"--neftune_noise_alpha", "1e308"},
                 {"--neftune_noise_alpha", "1e+308", "beyond fp32's range"});
  // A 10 MB option name is neither echoed whole nor compared letter by letter.
  const std::string huge = "--" + std::string(10 << 20, 'x');
  try {
    (void)parse_train_arguments({"--data", data_, huge, "1"});
    ADD_FAILURE() << "a 10 MB option was accepted";
  } catch (const ValueError& e) {
    EXPECT_LT(std::string(e.what()).size(), 200u);
    EXPECT_NE(std::string(e.what()).find("unknown option --xxx"), std::string::npos);
  }

  const std::string config = dir_.file("run.toml");
  write_bytes(config, "per-device-train-batch-size = -1\n");
  expect_invalid({"--config", config},
                 {config, "per-device-train-batch-size", "-1", "not positive"});
}

TEST_F(TrainArguments, ProfilingOptions) {
  const TrainingArguments defaults = parse({});
  EXPECT_FALSE(defaults.profile);
  EXPECT_EQ(defaults.profile_skip_first, 0);
  EXPECT_EQ(defaults.profile_wait, 1);
  EXPECT_EQ(defaults.profile_warmup, 1);
  EXPECT_EQ(defaults.profile_active, 3);
  EXPECT_EQ(defaults.profile_repeat, 1);
  EXPECT_EQ(defaults.memory_snapshot, "");
  const TrainingArguments set = parse(
      {"--profile", "--profile-wait", "0", "--profile_warmup", "2", "--profile-active", "4",
       "--profile_repeat", "0", "--profile_skip_first", "5", "--memory-snapshot", "run.pickle"});
  EXPECT_TRUE(set.profile);
  EXPECT_EQ(set.profile_wait, 0);
  EXPECT_EQ(set.profile_warmup, 2);
  EXPECT_EQ(set.profile_active, 4);
  EXPECT_EQ(set.profile_repeat, 0);
  EXPECT_EQ(set.profile_skip_first, 5);
  EXPECT_EQ(set.memory_snapshot, "run.pickle");
  expect_invalid({"--profile_active", "0"}, {"--profile_active", "0", "not positive"});
  expect_invalid({"--profile-wait", "-1"}, {"--profile_wait", "-1", "negative"});
  expect_invalid({"--profile_warmup", "-1"}, {"--profile_warmup", "negative"});
  expect_invalid({"--profile_repeat", "-2"}, {"--profile_repeat", "-2", "negative"});
  expect_invalid({"--profile_skip_first", "-1"}, {"--profile_skip_first", "negative"});
}

TEST_F(TrainArguments, DataIsRequiredAndMustExist) {
  expect_error<ValueError>([] { parse_train_arguments({}); }, {"--data is required"});
  expect_error<ValueError>(
      [&] {
        parse_train_arguments({"--data", dir_.file("absent.txt")});
      },
      {"--data", "absent.txt", "does not exist"});
}

TEST_F(TrainArguments, EvalStrategyStepsFallsBackToLoggingSteps) {
  // HF fills eval_steps from logging_steps in __post_init__; here the trainer reads it unset.
  const TrainingArguments args = parse({"--eval_strategy", "steps", "--logging_steps", "20"});
  EXPECT_EQ(args.eval_strategy, "steps");
  EXPECT_FALSE(args.eval_steps.has_value());
}

}  // namespace
}  // namespace headroom

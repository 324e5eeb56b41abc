// A resume compares its configuration with the checkpoint's training_config.json (Note [What a
// resume may change]): what changes the mathematics is refused naming the field and both values,
// what does not (logging, saving, a longer run, checkpointing) resumes bit for bit, and a
// checkpoint saved without the file resumes with the older checks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/json_file.h"
#include "train/checksums.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"
#include "train/training_config_record.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using test_data::TempDir;
using test_data::tiny_training_args;

// The ValueError's message of `f`, or "(accepted)".
template <typename F>
std::string value_error_of(F f) {
  try {
    f();
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::map<int64_t, double> step_losses(const Trainer& trainer) {
  std::map<int64_t, double> losses;
  for (const auto& entry : trainer.log_history()) {
    if (entry.contains("loss")) losses[entry["step"].get<int64_t>()] = entry["loss"].get<double>();
  }
  return losses;
}

// A run's arguments resumed from `checkpoint` into a fresh output_dir, for 4 steps.
TrainingArguments resumed_from(TrainingArguments args, const fs::path& checkpoint,
                               const fs::path& output_dir) {
  args.resume_from_checkpoint = checkpoint.string();
  args.output_dir = output_dir.string();
  args.max_steps = 4;
  return args;
}

// The checkpoint as an older headroom wrote it: no training_config.json, and checksums.json
// without it.
void remove_training_config(const fs::path& checkpoint) {
  ASSERT_TRUE(fs::remove(checkpoint / kTrainingConfigFile));
  write_checkpoint_checksums(checkpoint.string());
}

TEST(ResumeConfig, AChangeToTheMathematicsIsRefusedNamingTheFieldAndBothValues) {
  TempDir tmp("resume_config_refused");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.max_steps = 2;
  ASSERT_EQ(Trainer(args).train(), 0);
  const fs::path checkpoint = tmp.path() / "out" / "checkpoint-2";
  const std::string source = (checkpoint / kTrainingConfigFile).string();

  struct Case {
    const char* what;
    void (*change)(TrainingArguments&);
    const char* refusal;
  };
  const Case cases[] = {
      {"learning_rate", [](TrainingArguments& a) { a.learning_rate = 1e-3; },
       "learning_rate is 0.003 in the checkpoint and 0.001 in this run"},
      {"seed", [](TrainingArguments& a) { a.seed = 7; }, "seed is 42 in the checkpoint and 7"},
      {"gradient_accumulation_steps",
       [](TrainingArguments& a) { a.gradient_accumulation_steps = 2; },
       "gradient_accumulation_steps is 1 in the checkpoint and 2 in this run"},
      {"optim", [](TrainingArguments& a) { a.optim = "lion"; },
       "optim is adamw_torch in the checkpoint and lion in this run"},
      {"bf16", [](TrainingArguments& a) { a.bf16 = true; },
       "precision is fp32 in the checkpoint and bf16 in this run"},
      {"lr_scheduler_type", [](TrainingArguments& a) { a.lr_scheduler_type = "cosine"; },
       "lr_scheduler_type is linear in the checkpoint and cosine in this run"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    TrainingArguments changed = resumed_from(args, checkpoint, tmp.path() / c.what);
    c.change(changed);
    Trainer trainer(changed);
    const std::string e = value_error_of([&] { trainer.train(); });
    EXPECT_NE(e.find(str_cat(source, ": ", c.refusal)), std::string::npos) << e;
    // Refused before anything was applied or trained.
    EXPECT_EQ(trainer.global_step(), 0);
    EXPECT_FALSE(fs::exists(tmp.path() / c.what / "checkpoint-4"));
  }

  // "last" refuses at once: the older checkpoints are the same run's, not a fallback. Every
  // difference is named in the one line.
  TrainingArguments last = args;
  last.resume_from_checkpoint = "last";
  last.max_steps = 4;
  last.adam_beta2 = 0.99;
  last.weight_decay = 0.1;
  const std::string e = value_error_of([&] { Trainer(last).train(); });
  EXPECT_NE(e.find(str_cat(source,
                           ": weight_decay is 0.0 in the checkpoint and 0.1 in this run; "
                           "adam_beta2 is 0.999 in the checkpoint and 0.99 in this run; ")),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  EXPECT_EQ(e.find("no valid"), std::string::npos) << e;
}

// Logging, saving, a longer run and activation checkpointing change nothing a step computes: the
// resumed run's weights equal those of a run that had these options from the start, to the bit.
TEST(ResumeConfig, AChangeThatLeavesTheMathematicsAloneResumesBitForBit) {
  TempDir tmp("resume_config_accepted");
  TrainingArguments args = tiny_training_args(tmp.path());
  args.max_steps = 4;
  ASSERT_EQ(Trainer(args).train(), 0);
  const fs::path checkpoint = tmp.path() / "out" / "checkpoint-2";

  const nlohmann::json record =
      parse_json(read_text_file((checkpoint / kTrainingConfigFile).string()), kTrainingConfigFile);
  const nlohmann::json& fields = record.at("fields");
  EXPECT_EQ(fields.at("learning_rate").at("value").get<double>(), 3e-3);
  EXPECT_TRUE(fields.at("learning_rate").at("changes_math").get<bool>());
  EXPECT_EQ(fields.at("precision").at("value").get<std::string>(), "fp32");
  EXPECT_FALSE(fields.at("logging_steps").at("changes_math").get<bool>());
  EXPECT_FALSE(fields.at("max_steps").at("changes_math").get<bool>());

  TrainingArguments longer = args;
  longer.max_steps = 6;
  longer.logging_steps = 2;
  longer.save_steps = 3;
  longer.gradient_checkpointing = true;
  longer.dataloader_num_workers = 1;
  longer.output_dir = (tmp.path() / "uninterrupted").string();
  Trainer uninterrupted(longer);
  ASSERT_EQ(uninterrupted.train(), 0);

  TrainingArguments resumed_args = longer;
  resumed_args.output_dir = (tmp.path() / "resumed").string();
  resumed_args.resume_from_checkpoint = checkpoint.string();
  Trainer resumed(resumed_args);
  ASSERT_EQ(resumed.train(), 0);
  EXPECT_EQ(resumed.global_step(), 6);
  const auto a = uninterrupted.model().named_parameters();
  const auto b = resumed.model().named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].second.to_float_vector(), b[i].second.to_float_vector()) << a[i].first;
  }
  EXPECT_EQ(step_losses(resumed).at(6), step_losses(uninterrupted).at(6));
  EXPECT_TRUE(fs::exists(tmp.path() / "resumed" / "checkpoint-3"));
}

// A checkpoint saved before headroom wrote training_config.json resumes as before: the run it
// continues is repeated bit for bit, and only the older checks apply.
TEST(ResumeConfig, ACheckpointWithoutTheRecordResumesWithTheOlderChecks) {
  TempDir tmp("resume_config_old");
  TrainingArguments args = tiny_training_args(tmp.path());
  Trainer full(args);
  ASSERT_EQ(full.train(), 0);
  const fs::path checkpoint = tmp.path() / "out" / "checkpoint-2";
  remove_training_config(checkpoint);

  Trainer resumed(resumed_from(args, checkpoint, tmp.path() / "resumed"));
  ASSERT_EQ(resumed.train(), 0);
  const auto expected = step_losses(full), actual = step_losses(resumed);
  for (int64_t step = 3; step <= 4; ++step) EXPECT_EQ(actual.at(step), expected.at(step)) << step;
  EXPECT_EQ(resumed.model().parameters()[0].to_float_vector(),
            full.model().parameters()[0].to_float_vector());
  // The checkpoint it writes has the record.
  EXPECT_TRUE(fs::exists(tmp.path() / "resumed" / "checkpoint-4" / kTrainingConfigFile));

  // Nothing to compare a seed with: accepted, as before.
  TrainingArguments other_seed = resumed_from(args, checkpoint, tmp.path() / "other_seed");
  other_seed.seed = 7;
  EXPECT_EQ(value_error_of([&] { Trainer(other_seed).train(); }), "(accepted)");
}

// An older adapter checkpoint: its adapter_config.json's options are compared by the same rule.
TEST(ResumeConfig, AnOlderAdapterCheckpointHasItsLoraOptionsCompared) {
  TempDir tmp("resume_config_old_lora");
  TrainingArguments args = tiny_training_args(tmp.path(), 0.0);
  args.use_peft = true;
  args.lora_r = 4;
  args.max_steps = 2;
  ASSERT_EQ(Trainer(args).train(), 0);
  const fs::path checkpoint = tmp.path() / "out" / "checkpoint-2";
  remove_training_config(checkpoint);

  TrainingArguments other_alpha = resumed_from(args, checkpoint, tmp.path() / "resumed");
  other_alpha.lora_alpha = 16;
  const std::string e = value_error_of([&] { Trainer(other_alpha).train(); });
  EXPECT_NE(e.find(str_cat((checkpoint / "adapter_config.json").string(),
                           ": lora_alpha is 32.0 in the checkpoint and 16.0 in this run")),
            std::string::npos)
      << e;
  TrainingArguments same = resumed_from(args, checkpoint, tmp.path() / "same");
  EXPECT_EQ(value_error_of([&] { Trainer(same).train(); }), "(accepted)");
}

// Every field once, each with its rule; the file reads back to a record that matches itself,
// and a malformed one is refused naming the file.
TEST(ResumeConfig, TheRecordNamesEachFieldOnceAndReadsBack) {
  TempDir tmp("resume_config_record");
  TrainingArguments args = tiny_training_args(tmp.path());
  const TrainingConfig config = resolve_training_config(args);
  const HfConfig model = read_hf_config((tmp.path() / "model" / "config.json").string());
  const ConfigRecord record = training_config_record(config, model);
  std::set<std::string> names;
  for (const ConfigField& field : record) {
    EXPECT_TRUE(names.insert(field.name).second) << field.name << " twice";
  }
  for (const char* name : {"learning_rate", "seed", "precision", "optim", "lora_r", "model_config",
                           "load_in_4bit", "fp8_recipe", "max_steps", "save_steps"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  const std::string path = (tmp.path() / kTrainingConfigFile).string();
  const nlohmann::ordered_json fields =
      parse_training_config_fields(training_config_json(record), path);
  EXPECT_NO_THROW(check_resumed_config(fields, record, path));

  // An architecture change is named by its key.
  HfConfig deeper = model;
  std::get<GPT2Config>(deeper).n_layer = 3;
  const std::string e = value_error_of(
      [&] { check_resumed_config(fields, training_config_record(config, deeper), path); });
  EXPECT_NE(e.find("model_config.n_layer is 2 in the checkpoint and 3 in this run"),
            std::string::npos)
      << e;

  for (const char* text : {"[]", "{\"format\": 2, \"fields\": {}}", "{\"format\": 1}",
                           "{\"format\": 1, \"fields\": {\"seed\": {\"value\": 1}}}"}) {
    const std::string refusal = value_error_of([&] { parse_training_config_fields(text, path); });
    EXPECT_EQ(refusal.rfind(path + ": ", 0), 0u) << text << ": " << refusal;
  }
}

}  // namespace
}  // namespace headroom

// LR schedules against HF's lambdas driven by torch's LambdaLR
// (tests/fixtures/optim/lr_scheduler_golden.txt, written by tools/gen_sched_clip_golden.py), the
// warmup_ratio rule, option checks, and the state_dict round trip.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "io/io_test_helpers.h"
#include "optim/adamw.h"
#include "optim/golden_lines.h"
#include "optim/lr_scheduler.h"

namespace headroom {
namespace {

using io_test::expect_error;
using optim_test::for_each_golden_line;
using optim_test::read_numbers;

// An AdamW over two one-element parameters: group 0 takes the optimizer's lr, group 1 its own.
class TwoGroups {
 public:
  TwoGroups(double lr0, double lr1)
      : a_(Tensor::zeros({1}).set_requires_grad(true)),
        b_(Tensor::zeros({1}).set_requires_grad(true)),
        optimizer_(
            std::vector<ParamGroup>{{.params = {{"a", a_}}}, {.params = {{"b", b_}}, .lr = lr1}},
            AdamWOptions{.lr = lr0}) {}
  AdamW& optimizer() { return optimizer_; }

 private:
  Tensor a_, b_;
  AdamW optimizer_;
};

struct GoldenSchedule {
  std::string id;
  SchedulerOptions options;
  int64_t resolved_warmup = -1;
  std::vector<std::vector<double>> lrs;  // [last_epoch][group]
};

struct Golden {
  double lr0 = 0.0, lr1 = 0.0;
  std::vector<GoldenSchedule> schedules;
  std::vector<std::vector<double>> warmup_rules;  // training_steps, warmup_steps, ratio, result
};

Golden read_golden() {
  Golden golden;
  std::map<std::string, size_t> index;
  const auto read_line = [&](const std::string& kind, std::istringstream& in) {
    std::string id;
    if (kind == "groups") {
      in >> golden.lr0 >> golden.lr1;
    } else if (kind == "schedule") {
      GoldenSchedule s;
      std::string type, key;
      in >> s.id >> type;
      s.options.type = parse_scheduler_type(type);
      in >> key >> s.options.num_warmup_steps >> key >> s.options.warmup_ratio >> key >>
          s.options.num_training_steps;
      double value = 0.0;
      while (in >> key >> value) {
        if (key == "num_cycles") s.options.num_cycles = value;
        if (key == "lr_end") s.options.lr_end = value;
        if (key == "power") s.options.power = value;
        if (key == "timescale") s.options.timescale = static_cast<int64_t>(value);
      }
      index[s.id] = golden.schedules.size();
      golden.schedules.push_back(s);
    } else if (kind == "warmup") {
      in >> id;
      in >> golden.schedules.at(index.at(id)).resolved_warmup;
    } else if (kind == "lr") {
      int64_t step = 0;
      in >> id >> step;
      std::vector<std::vector<double>>& lrs = golden.schedules.at(index.at(id)).lrs;
      EXPECT_EQ(step, static_cast<int64_t>(lrs.size())) << id;
      lrs.push_back(read_numbers(in));
    } else if (kind == "warmup_rule") {
      golden.warmup_rules.push_back(read_numbers(in));
    }
  };
  for_each_golden_line("lr_scheduler_golden.txt", read_line);
  return golden;
}

TEST(LRScheduler, MatchesHfSchedulesThroughLambdaLR) {
  const Golden golden = read_golden();
  ASSERT_EQ(golden.schedules.size(), 25u);
  int compared = 0, bit_identical = 0;
  for (const GoldenSchedule& s : golden.schedules) {
    SCOPED_TRACE(s.id);
    TwoGroups groups(golden.lr0, golden.lr1);
    LRScheduler scheduler(groups.optimizer(), s.options);
    EXPECT_EQ(scheduler.options().num_warmup_steps, s.resolved_warmup);
    EXPECT_EQ(scheduler.base_lrs(), (std::vector<double>{golden.lr0, golden.lr1}));
    ASSERT_EQ(s.lrs.size(), static_cast<size_t>(s.options.num_training_steps + 4));
    for (size_t step = 0; step < s.lrs.size(); ++step) {
      if (step > 0) scheduler.step();
      ASSERT_EQ(scheduler.last_epoch(), static_cast<int64_t>(step));
      for (size_t g = 0; g < 2; ++g) {
        const double want = s.lrs[step][g];
        const double got = groups.optimizer().group_lr(g);
        EXPECT_LE(std::abs(got - want), 1e-12 * std::abs(want))
            << "group " << g << " at step " << step << ": " << got << " vs torch " << want;
        EXPECT_EQ(scheduler.last_lr()[g], got);
        ++compared;
        bit_identical += got == want;
      }
    }
  }
  std::printf("%d of %d learning rates bit-identical to HF/torch\n", bit_identical, compared);
}

TEST(LRScheduler, WarmupRatioBecomesStepsAsTrainingArguments) {
  const Golden golden = read_golden();
  ASSERT_FALSE(golden.warmup_rules.empty());
  for (const std::vector<double>& rule : golden.warmup_rules) {
    ASSERT_EQ(rule.size(), 4u);
    EXPECT_EQ(
        get_warmup_steps(static_cast<int64_t>(rule[0]), static_cast<int64_t>(rule[1]), rule[2]),
        static_cast<int64_t>(rule[3]))
        << "training_steps " << rule[0] << ", warmup_steps " << rule[1] << ", ratio " << rule[2];
  }
  EXPECT_EQ(get_warmup_steps(100, 0, 0.07), 8) << "100 * 0.07 is 7.000000000000001 in doubles";
}

TEST(LRScheduler, ParsesHfSchedulerTypeNames) {
  for (const char* name : {"linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
                           "constant_with_warmup", "inverse_sqrt"}) {
    EXPECT_STREQ(scheduler_type_name(parse_scheduler_type(name)), name);
  }
  expect_error<ValueError>([] { parse_scheduler_type("cosine_annealing"); },
                           {"'cosine_annealing'",
                            "linear, cosine, cosine_with_restarts, "
                            "polynomial, constant, constant_with_warmup, "
                            "inverse_sqrt"});
  expect_error<NotImplementedError>([] { parse_scheduler_type("reduce_lr_on_plateau"); },
                                    {"reduce_lr_on_plateau"});
}

TEST(LRScheduler, RejectsOptionsHfWouldMisbehaveOn) {
  using T = SchedulerType;
  const struct {
    SchedulerOptions options;
    std::string piece, also = "";
  } cases[] = {
      {{.type = T::linear, .num_warmup_steps = -1, .num_training_steps = 10},
       "num_warmup_steps is -1"},
      {{.type = T::constant, .num_training_steps = -5}, "num_training_steps is -5"},
      {{.type = T::linear, .num_training_steps = 10, .warmup_ratio = 1.5},
       "warmup_ratio is 1.5",
       "[0, 1]"},
      {{.type = T::cosine}, "cosine schedule", "num_training_steps is 0"},
      {{.type = T::polynomial, .num_warmup_steps = 10, .num_training_steps = 10},
       "polynomial",
       "num_warmup_steps (10) equals num_training_steps (10)"},
      {{.type = T::cosine, .num_training_steps = 10, .num_cycles = 0.0}, "num_cycles is 0"},
      {{.type = T::polynomial, .num_training_steps = 10, .lr_end = 0.01},
       "lr_end (0.01) must be smaller than initial lr",
       "0.001"},
      {{.type = T::polynomial, .num_training_steps = 10, .power = -1.0}, "power is -1"},
      {{.type = T::polynomial, .num_training_steps = 10, .lr_end = -1e-7}, "lr_end is -1e-07"},
      {{.type = T::inverse_sqrt, .timescale = 0}, "inverse_sqrt", "timescale is 0"},
  };
  for (const auto& c : cases) {
    TwoGroups groups(1e-3, 3e-4);
    expect_error<ValueError>([&] { LRScheduler(groups.optimizer(), c.options); },
                             {c.piece, c.also});
    EXPECT_EQ(groups.optimizer().group_lr(0), 1e-3) << "a rejected scheduler changes no lr";
  }
  // HF's constant schedule ignores warmup, and constant_with_warmup needs no training steps.
  TwoGroups groups(1e-3, 3e-4);
  LRScheduler constant(groups.optimizer(), {.type = T::constant, .num_warmup_steps = 5});
  EXPECT_EQ(groups.optimizer().group_lr(0), 1e-3);
  LRScheduler warmup(groups.optimizer(), {.type = T::constant_with_warmup, .num_warmup_steps = 5});
  EXPECT_EQ(warmup.lr_lambda(1), 0.2);
  EXPECT_THROW(warmup.lr_lambda(-1), ValueError);
}

TEST(LRScheduler, PolynomialDecaysEveryGroupFromGroupZerosLr) {
  // HF's lr_init is optimizer.defaults["lr"] for every group; group 1 ends at lr_end * 0.3.
  TwoGroups groups(1e-3, 3e-4);
  const SchedulerOptions options{
      .type = SchedulerType::polynomial, .num_training_steps = 4, .lr_end = 1e-4};
  LRScheduler scheduler(groups.optimizer(), options);
  EXPECT_EQ(*scheduler.options().lr_init, 1e-3);
  for (int i = 0; i < 4; ++i) scheduler.step();
  EXPECT_NEAR(scheduler.last_lr()[0], 1e-4, 1e-18);
  EXPECT_NEAR(scheduler.last_lr()[1], 3e-5, 1e-18);
}

TEST(LRScheduler, StateDictRoundTripsThroughJsonText) {
  const SchedulerOptions options{
      .type = SchedulerType::cosine, .num_warmup_steps = 3, .num_training_steps = 20};
  TwoGroups first(1e-3, 3e-4);
  LRScheduler original(first.optimizer(), options);
  for (int i = 0; i < 7; ++i) original.step();

  const nlohmann::json state = original.state_dict();
  EXPECT_EQ(state.at("last_epoch"), 7);
  EXPECT_EQ(state.at("_step_count"), 8);
  EXPECT_EQ(state.at("base_lrs").get<std::vector<double>>(), (std::vector<double>{1e-3, 3e-4}));
  EXPECT_EQ(state.at("_last_lr").get<std::vector<double>>(), original.last_lr());
  EXPECT_EQ(state.size(), 4u);

  // A new run: its optimizer starts from the configured lrs, as a resumed Trainer's does.
  TwoGroups second(1e-3, 3e-4);
  LRScheduler resumed(second.optimizer(), options);
  resumed.load_state_dict(nlohmann::json::parse(state.dump()));
  EXPECT_EQ(resumed.last_epoch(), 7);
  EXPECT_EQ(resumed.step_count(), 8);
  EXPECT_EQ(second.optimizer().group_lr(0), first.optimizer().group_lr(0));
  EXPECT_EQ(second.optimizer().group_lr(1), first.optimizer().group_lr(1));
  for (int i = 0; i < 16; ++i) {
    original.step();
    resumed.step();
    EXPECT_EQ(resumed.last_lr(), original.last_lr()) << "after " << 8 + i << " steps";
  }
  EXPECT_EQ(resumed.state_dict(), original.state_dict());
}

TEST(LRScheduler, LoadStateDictNamesWhatIsWrongAndChangesNothing) {
  TwoGroups groups(1e-3, 3e-4);
  LRScheduler scheduler(groups.optimizer(),
                        {.type = SchedulerType::linear, .num_training_steps = 10});
  scheduler.step();
  const nlohmann::json good = scheduler.state_dict();
  const nlohmann::json before = scheduler.state_dict();

  nlohmann::json missing = good;
  missing.erase("_step_count");
  nlohmann::json one_group = good;
  one_group["base_lrs"] = {1e-3};
  nlohmann::json text_epoch = good;
  text_epoch["last_epoch"] = "3";
  nlohmann::json negative_lr = good;
  negative_lr["_last_lr"] = {1e-3, -1.0};
  nlohmann::json huge_epoch = good;  // step() would overflow it (issue 19)
  huge_epoch["last_epoch"] = INT64_MAX;
  nlohmann::json wrapped_count = good;  // above INT64_MAX: read back negative
  wrapped_count["_step_count"] = uint64_t{1} << 63;
  const std::pair<nlohmann::json, std::string> cases[] = {
      {missing, "'_step_count' is missing"},
      {one_group, "'base_lrs' is [0.001]; expected a list of 2 learning rates"},
      {text_epoch, "'last_epoch' is \"3\"; expected an integer"},
      {huge_epoch,
       "'last_epoch' is 9223372036854775807; expected an integer in 0..4611686018427387904"},
      {wrapped_count, "'_step_count' is 9223372036854775808; expected an integer in 1.."},
      {negative_lr, "'_last_lr' holds -1.0"},
      {nlohmann::json::array(), "expected a JSON object, not array"},
  };
  for (const auto& [state_binding, piece] : cases) {
    const nlohmann::json& state = state_binding;  // clang 14 captures no structured binding
    expect_error<ValueError>([&] { scheduler.load_state_dict(state); }, {piece});
    EXPECT_EQ(scheduler.state_dict(), before);
    EXPECT_EQ(groups.optimizer().group_lr(1), before["_last_lr"][1].get<double>());
  }
}

}  // namespace
}  // namespace headroom

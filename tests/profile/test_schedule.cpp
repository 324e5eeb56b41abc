// ProfilerSchedule and Profiler::step against torch.profiler: the action of every step, and which
// ProfilerStep#N a run records (tests/fixtures/profile/schedule_golden.txt, written by
// tools/gen_profiler_golden.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/ops.h"
#include "optim/golden_lines.h"
#include "profile/profiler.h"
#include "profile/schedule.h"

namespace headroom {
namespace {

struct ScheduleCase {
  ProfilerSchedule schedule;
  int64_t steps = 0;
  std::vector<std::string> actions;  // of steps 0 .. steps
  std::vector<int64_t> recorded;
};

std::vector<ScheduleCase> read_schedule_cases() {
  std::vector<ScheduleCase> cases;
  optim_test::for_each_fixture_line(
      "profile/schedule_golden.txt", [&](const std::string& keyword, std::istringstream& in) {
        if (keyword == "schedule") {
          ScheduleCase c;
          ProfilerSchedule& s = c.schedule;
          in >> s.wait >> s.warmup >> s.active >> s.repeat >> s.skip_first >> c.steps;
          cases.push_back(c);
        } else if (keyword == "actions") {
          for (std::string action; in >> action;) cases.back().actions.push_back(action);
        } else if (keyword == "recorded") {
          for (int64_t step; in >> step;) cases.back().recorded.push_back(step);
        } else {
          ADD_FAILURE() << "unknown keyword " << keyword;
        }
      });
  return cases;
}

std::string describe(const ProfilerSchedule& s) {
  return str_cat("wait ", s.wait, " warmup ", s.warmup, " active ", s.active, " repeat ", s.repeat,
                 " skip_first ", s.skip_first);
}

TEST(ProfilerSchedule, ActionsAreTorchs) {
  const std::vector<ScheduleCase> cases = read_schedule_cases();
  ASSERT_GE(cases.size(), 8u);
  for (const ScheduleCase& c : cases) {
    SCOPED_TRACE(describe(c.schedule));
    ASSERT_EQ(c.actions.size(), static_cast<size_t>(c.steps + 1));
    for (int64_t step = 0; step <= c.steps; ++step) {
      EXPECT_EQ(profiler_action_name(c.schedule.action(step)), c.actions[step]) << "step " << step;
    }
  }
}

// The loop `work; profiler.step()` for `steps` steps, then stop(), as the fixture's torch run:
// a step is recorded whole, and the step begun by the last step() too when the schedule says so.
TEST(ProfilerSchedule, RecordsTheStepsTorchRecords) {
  for (const ScheduleCase& c : read_schedule_cases()) {
    SCOPED_TRACE(describe(c.schedule));
    Profiler profiler({.schedule = c.schedule});
    profiler.start();
    for (int64_t step = 0; step < c.steps; ++step) {
      const Tensor x = Tensor::ones({2}, DType::f32, kCPU);
      add(x, x);
      profiler.step();
    }
    profiler.stop();
    std::vector<int64_t> recorded;
    int64_t adds = 0;
    for (const RecordedFunction& f : profiler.events().functions) {
      if (f.name.starts_with("ProfilerStep#")) {
        EXPECT_EQ(f.scope, RecordScope::user_scope);
        recorded.push_back(std::stoll(f.name.substr(13)));
      }
      adds += f.name == "add";
    }
    std::sort(recorded.begin(), recorded.end());
    EXPECT_EQ(recorded, c.recorded);
    // One add per recorded step, but none in the empty step begun by the last step().
    const auto last_recorded = std::find(recorded.begin(), recorded.end(), c.steps);
    EXPECT_EQ(adds, static_cast<int64_t>(recorded.size()) - (last_recorded != recorded.end()));
  }
}

TEST(ProfilerSchedule, RejectsTorchsInvalidArguments) {
  auto expect_rejected = [](ProfilerSchedule s, const std::string& field) {
    try {
      s.validate();
      ADD_FAILURE() << "accepted " << describe(s);
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
    EXPECT_THROW(Profiler({.schedule = s}), ValueError);
  };
  expect_rejected({.active = 0}, "active 0 is below 1");
  expect_rejected({.wait = -1}, "wait -1");
  expect_rejected({.warmup = -2}, "warmup -2");
  expect_rejected({.repeat = -1}, "repeat -1");
  expect_rejected({.skip_first = -3}, "skip_first -3");
  EXPECT_THROW(ProfilerSchedule{}.action(-1), ValueError);
}

TEST(Profiler, StepOutsideStartAndStopIsAnError) {
  Profiler profiler;
  EXPECT_THROW(profiler.step(), Error);
  profiler.start();
  EXPECT_THROW(profiler.start(), Error);
  EXPECT_TRUE(profiler.is_recording());  // no schedule: every step records
  profiler.step();
  EXPECT_EQ(profiler.step_num(), 1);
  profiler.stop();
  EXPECT_FALSE(profiler.is_recording());
  EXPECT_THROW(profiler.step(), Error);
  profiler.stop();  // again: nothing happens
}

}  // namespace
}  // namespace headroom

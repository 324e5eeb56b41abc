// Note [Planning under the card's capacity]: a dry run under a capacity frees the cache and
// retries as the real allocator does, so it reserves, allocates and retries what a real run
// under the same --memory_limit does, to the byte.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "memory/device_memory.h"
#include "plan/dry_run.h"
#include "plan/machine_fit.h"
#include "plan/training_plan.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

using test_data::TempDir;

// The tiny run with a batch big enough for large-pool requests (over 1 MiB: the logits), so that
// the allocator caches segments of several sizes.
TrainingArguments slack_args(const std::filesystem::path& root) {
  TrainingArguments args = test_data::tiny_training_args(root, 0.0);
  args.per_device_train_batch_size = 256;
  // Enough windows for full batches of 256, as the dry run's are.
  args.data = (root / "long.txt").string();
  std::ofstream data(args.data);
  for (int copy = 0; copy < 40; ++copy) data << test_data::kTinyText << "\n";
  args.save_strategy = "no";
  args.max_steps = 2;
  return args;
}

TEST(PlanCapacity, UnboundedReservedPeakIsEnoughAndNeedsNoRetry) {
  TempDir tmp("plan_capacity_enough");
  const TrainingArguments args = slack_args(tmp.path());
  const DryRunResult unbounded = dry_run_training(args);
  DryRunOptions options;
  options.memory_limit = unbounded.peak_reserved_bytes;
  const DryRunResult capped = dry_run_training(args, options);
  EXPECT_EQ(capped.alloc_retries, 0);
  EXPECT_EQ(capped.peak_reserved_bytes, unbounded.peak_reserved_bytes);
  EXPECT_EQ(capped.peak_allocated_bytes, unbounded.peak_allocated_bytes);
}

// Under a capacity between the allocated and the reserved peak, this run's reserved bytes are
// in segments that still hold live blocks, which freeing the cache cannot return (PyTorch's
// policy frees whole free segments only): the dry run runs out of memory, and so does the real
// run under the same --memory_limit, at the same request.
TEST(PlanCapacity, UnderACapacityTheDryRunFailsWhereTheRealRunFails) {
  TempDir tmp("plan_capacity_oom");
  const TrainingArguments args = slack_args(tmp.path());
  const DryRunResult unbounded = dry_run_training(args);
  ASSERT_GT(unbounded.peak_reserved_bytes, unbounded.peak_allocated_bytes)
      << "no slack to take away";
  DryRunOptions options;
  options.memory_limit = (unbounded.peak_allocated_bytes + unbounded.peak_reserved_bytes) / 2;
  std::string planned, ran;
  try {
    dry_run_training(args, options);
  } catch (const OutOfMemoryError& e) {
    planned = e.what();
  }
  ASSERT_FALSE(planned.empty()) << "the dry run fit under " << options.memory_limit;
  empty_cache(kCPU);
  set_memory_limit(kCPU, static_cast<size_t>(options.memory_limit));
  try {
    Trainer trainer(args);
    trainer.train();
  } catch (const OutOfMemoryError& e) {
    ran = e.what();
  }
  set_memory_limit(kCPU, 0);
  empty_cache(kCPU);
  ASSERT_FALSE(ran.empty()) << "the real run fit under " << options.memory_limit;
  // The same request, the same bytes in use: the messages agree but for the device's name.
  const auto from_request = [](const std::string& message) {
    return message.substr(message.find("Tried to allocate"),
                          message.find("Device") - message.find("Tried to allocate"));
  };
  EXPECT_EQ(from_request(ran), from_request(planned)) << ran << "\n" << planned;
  const auto in_use = [](const std::string& message) {
    return message.substr(message.find("Of the memory in use"), 90);
  };
  EXPECT_EQ(in_use(ran), in_use(planned));
}

// plan_training under a card's capacity: a configuration whose unbounded reserved peak does not
// fit is dry-run again under the capacity, and the report says how that ended.
TEST(PlanCapacity, APlanThatDoesNotFitUnboundedIsTriedUnderTheCapacity) {
  TempDir tmp("plan_capacity_plan");
  const TrainingArguments args = slack_args(tmp.path());
  const DryRunResult unbounded = dry_run_training(args);
  PlanTarget target;
  target.device = kCPU;
  target.capacity_bytes = (unbounded.peak_allocated_bytes + unbounded.peak_reserved_bytes) / 2;
  const TrainingPlan plan = plan_training(args, target);
  ASSERT_TRUE(plan.unbounded_peak_reserved);
  EXPECT_EQ(*plan.unbounded_peak_reserved, unbounded.peak_reserved_bytes);
  EXPECT_TRUE(plan.out_of_memory_under_capacity);  // as the test above finds
  EXPECT_FALSE(plan.fits());
  EXPECT_NE(plan.format().find("runs out of memory even after freeing the cache"),
            std::string::npos);
  target.capacity_bytes = unbounded.peak_reserved_bytes;  // fits unbounded: no second run
  EXPECT_FALSE(plan_training(args, target).unbounded_peak_reserved);
}

// Note [Finding the batch size from the plan]: under a cap at what a micro-batch of 64 reserves,
// 256 and 128 run out of memory in their dry runs, 64 fits, and the accumulation keeps 256.
TEST(FindBatchSize, TheLargestMicroBatchThatFitsKeepsTheEffectiveBatch) {
  TempDir tmp("find_batch_size");
  TrainingArguments args = slack_args(tmp.path());
  TrainingArguments at_64 = args;
  at_64.per_device_train_batch_size = 64;
  const DryRunResult plan_64 = dry_run_training(at_64);
  args.memory_limit = std::to_string(plan_64.peak_reserved_bytes);
  std::string why;
  const TrainingArguments found = find_batch_size(args, &why);
  EXPECT_EQ(found.per_device_train_batch_size, 64) << why;
  EXPECT_EQ(found.gradient_accumulation_steps, 4) << why;
  EXPECT_NE(why.find("per_device_train_batch_size 256 -> 64, gradient_accumulation_steps 1 -> 4"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("(256, 128 did not fit)"), std::string::npos) << why;
  // The run trains under the cap as its dry run did.
  empty_cache(kCPU);
  set_memory_limit(kCPU, static_cast<size_t>(plan_64.peak_reserved_bytes));
  int status = -1;
  try {
    Trainer trainer(found);
    status = trainer.train();
  } catch (const OutOfMemoryError& e) {
    ADD_FAILURE() << e.what();
  }
  set_memory_limit(kCPU, 0);
  empty_cache(kCPU);
  EXPECT_EQ(status, 0);

  args.memory_limit = "1MiB";  // not even the weights and a micro-batch of 1
  EXPECT_THROW(find_batch_size(args), ValueError);
}

}  // namespace
}  // namespace headroom

// Device "auto": a GPU is chosen only when its backend computes the ops (Note [Devices that
// compute the ops]), tested with a stand-in CUDA backend registered for the test's duration.
#include <gtest/gtest.h>

#include "core/device_kernels.h"
#include "plan/dry_run.h"
#include "train/model_source.h"
#include "train/trainer.h"
#include "train/trainer_fixture.h"

namespace headroom {
namespace {

// Registers a CUDA kernel table that reports one GPU, with or without op kernels; puts back
// whatever was registered before (nothing in a CPU-only build, the real backend in a CUDA one).
class FakeCudaBackend {
 public:
  explicit FakeCudaBackend(bool has_op_kernels) : previous_(find_device_kernels(DeviceType::cuda)) {
    kernels_.device_count = [] { return 1; };
    kernels_.has_op_kernels = has_op_kernels;
    register_device_kernels(DeviceType::cuda, &kernels_);
  }
  ~FakeCudaBackend() { register_device_kernels(DeviceType::cuda, previous_); }
  FakeCudaBackend(const FakeCudaBackend&) = delete;
  FakeCudaBackend& operator=(const FakeCudaBackend&) = delete;

 private:
  const DeviceKernels* previous_;
  DeviceKernels kernels_;
};

const Device kCuda0{DeviceType::cuda, 0};

TEST(AutoDevice, IsTheCpuWhileTheCudaBackendHasNoOpKernels) {
  FakeCudaBackend gpu(/*has_op_kernels=*/false);
  ASSERT_TRUE(cuda_is_available());
  EXPECT_FALSE(device_has_op_kernels(DeviceType::cuda));
  EXPECT_EQ(auto_device(), kCPU);
  EXPECT_EQ(resolve_device("auto"), kCPU);
  EXPECT_EQ(planned_device("auto"), kCPU) << "headroom plan plans for the device train would use";
  // An explicit device is taken as asked; its ops then name the missing kernel.
  EXPECT_EQ(resolve_device("cuda"), kCuda0);
  EXPECT_EQ(resolve_device("cuda:1"), (Device{DeviceType::cuda, 1}));
}

TEST(AutoDevice, IsTheGpuOnceTheCudaBackendHasOpKernels) {
  FakeCudaBackend gpu(/*has_op_kernels=*/true);
  EXPECT_EQ(auto_device(), kCuda0);
  EXPECT_EQ(resolve_device("auto"), kCuda0);
  EXPECT_EQ(resolve_device("cpu"), kCPU);
}

TEST(AutoDevice, IsTheCpuWithoutAGpu) {
  if (cuda_is_available()) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(resolve_device("auto"), kCPU);
}

// The trainer builds its model on the CPU for device "auto" on a GPU machine today.
TEST(AutoDevice, TheTrainerBuildsOnTheCpuWhenTheGpuCannotComputeTheOps) {
  test_data::TempDir tmp("auto_device_trainer");
  TrainingArguments args = test_data::tiny_training_args(tmp.path());
  args.device = "auto";
  FakeCudaBackend gpu(/*has_op_kernels=*/false);
  Trainer trainer(args);
  EXPECT_EQ(trainer.model().parameters().at(0).device(), kCPU);
}

}  // namespace
}  // namespace headroom

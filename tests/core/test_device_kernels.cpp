// The device-kernels registry's answer to "do the ops run on this device?" (Note [Devices that
// compute the ops]) against what the ops' dispatch (op_route) actually does, and the CUDA op
// table's completeness in a CUDA build.
#include <gtest/gtest.h>

#include <string>

#include "backend/device_ops.h"
#include "core/device_kernels.h"
#include "core/error.h"
#include "ops/op_support.h"

namespace headroom {
namespace {

TEST(DeviceKernels, HasOpKernelsAgreesWithTheOpsDispatch) {
  for (const DeviceType type : {DeviceType::cpu, DeviceType::cuda, DeviceType::meta}) {
    SCOPED_TRACE(device_type_name(type));
    const Device device{type, 0};
    if (device_has_op_kernels(type)) {
      EXPECT_NO_THROW(op_route("probe_op", device));
    } else {
      try {
        op_route("probe_op", device);
        ADD_FAILURE() << "the ops run on " << device << ", whose backend says they have none";
      } catch (const NotImplementedError& e) {
        EXPECT_NE(std::string(e.what()).find("probe_op has no kernel for " + device.str()),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

TEST(DeviceKernels, TheCpuAndMetaComputeTheOps) {
  EXPECT_TRUE(device_has_op_kernels(DeviceType::cpu));
  EXPECT_TRUE(device_has_op_kernels(DeviceType::meta));
}

#ifdef HEADROOM_WITH_CUDA
TEST(DeviceKernels, TheCudaOpTableIsCompleteAndSaysSo) {
  const DeviceOps* ops = find_device_ops(DeviceType::cuda);
  ASSERT_NE(ops, nullptr) << "no CUDA kernel file registered an op";
  const std::vector<std::string> missing = missing_device_ops(*ops);
  std::string names;
  for (const std::string& m : missing) names += " " + m;
  EXPECT_TRUE(missing.empty()) << "DeviceOps entries without a CUDA kernel:" << names;
  EXPECT_TRUE(device_has_op_kernels(DeviceType::cuda));
}
#else
TEST(DeviceKernels, ACpuOnlyBuildHasNoCudaOps) {
  EXPECT_EQ(find_device_ops(DeviceType::cuda), nullptr);
  EXPECT_FALSE(device_has_op_kernels(DeviceType::cuda));
}
#endif

}  // namespace
}  // namespace headroom

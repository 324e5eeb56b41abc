// The device-kernels registry's answer to "do the ops run on this device?" (Note [Devices that
// compute the ops]) against what the ops' dispatch (computes_on_cpu) actually does.
#include <gtest/gtest.h>

#include <string>

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
      EXPECT_NO_THROW(computes_on_cpu("probe_op", device));
    } else {
      try {
        computes_on_cpu("probe_op", device);
        ADD_FAILURE() << "the ops run on " << device << ", whose backend says they have none";
      } catch (const NotImplementedError& e) {
        EXPECT_NE(std::string(e.what()).find("probe_op has no kernel for " + device.str()),
                  std::string::npos)
            << e.what();
      }
    }
  }
}

TEST(DeviceKernels, TheCpuAndMetaComputeTheOpsAndCudaDoesNotYet) {
  EXPECT_TRUE(device_has_op_kernels(DeviceType::cpu));
  EXPECT_TRUE(device_has_op_kernels(DeviceType::meta));
  // Both the no_cuda stub (no kernels registered) and the CUDA backend (Tensor kernels only)
  // answer no; the CUDA op kernels will change this line.
  EXPECT_FALSE(device_has_op_kernels(DeviceType::cuda));
}

}  // namespace
}  // namespace headroom

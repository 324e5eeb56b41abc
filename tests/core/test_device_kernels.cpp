// The device-kernels registry's answer to "do the ops run on this device?" (Note [Devices that
// compute the ops]) against what the ops' dispatch (need_kernel) actually does, the kernel tables'
// reports of missing entries by name (Note [Kernel tables]), and the CUDA tables' completeness in
// a CUDA build.
#include <gtest/gtest.h>

#include <string>

#include "backend/backend.h"
#include "backend/norm_kernels.h"
#include "backend/softmax_kernels.h"
#include "core/device_kernels.h"
#include "core/error.h"
#include "core/tensor.h"

namespace headroom {
namespace {

TEST(DeviceKernels, HasOpKernelsAgreesWithTheOpsDispatch) {
  for (const DeviceType type : {DeviceType::cpu, DeviceType::cuda, DeviceType::meta}) {
    SCOPED_TRACE(device_type_name(type));
    const Device device{type, 0};
    if (device_has_op_kernels(type)) {
      EXPECT_NO_THROW(need_kernel("probe_op", device, &SoftmaxKernels::forward));
    } else {
      try {
        need_kernel("probe_op", device, &SoftmaxKernels::forward);
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

std::string joined(const std::vector<std::string>& names) {
  std::string all;
  for (const std::string& n : names) all += " " + n;
  return all;
}

TEST(KernelTables, AMissingEntryIsReportedByFamilyAndName) {
  const NormKernels empty{};
  const std::vector<std::string> missing = missing_kernels(empty);
  EXPECT_EQ(joined(missing),
            " norm.layer_norm_forward norm.layer_norm_backward norm.rms_norm_forward"
            " norm.rms_norm_backward norm.add_layer_norm_forward norm.add_rms_norm_forward");
}

// An optional entry names what happens without it and is not reported missing.
struct ProbeKernels {
  static constexpr const char* kName = "probe";
  Kernel<void(int)> required{"required"};
  Kernel<int(int)> optional{"optional", "the op does without"};
};

TEST(KernelTables, OptionalEntriesAreNotMissing) {
  ProbeKernels k;
  EXPECT_EQ(joined(missing_kernels(k)), " probe.required");
  k.required = [](int) {};
  EXPECT_TRUE(missing_kernels(k).empty());
  EXPECT_FALSE(k.optional);
}

TEST(KernelTables, TheMetaTablesAreCompleteNoOps) {
  const KernelTables* meta = find_kernel_tables(DeviceType::meta);
  ASSERT_NE(meta, nullptr);
  EXPECT_EQ(joined(missing_kernels(*meta)), "");
  const Tensor x = Tensor::empty({4, 8}, DType::bf16, kMeta);
  EXPECT_NO_THROW(need_kernel("softmax", kMeta, &SoftmaxKernels::forward)(x, 4, 8, 1, x));
}

TEST(KernelTables, TheErrorNamesTheOpTheEntryAndTheDevice) {
  // A device whose backend has no such kernel: cuda in a CPU-only build.
  // With the CUDA backend built, cuda has every table, so no device lacks the kernel to probe.
  if (find_kernel_tables(DeviceType::cuda)) GTEST_SKIP() << "this build has the CUDA backend";
  try {
    need_kernel("probe_op", Device{DeviceType::cuda, 0}, &NormKernels::layer_norm_forward);
    ADD_FAILURE() << "no error";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("probe_op has no kernel for cuda:0 yet: its backend lacks "
                                         "norm.layer_norm_forward"),
              std::string::npos)
        << e.what();
  }
}

#ifdef HEADROOM_WITH_CUDA
TEST(DeviceKernels, TheCudaKernelTablesAreCompleteAndSaySo) {
  const KernelTables* tables = find_kernel_tables(DeviceType::cuda);
  ASSERT_NE(tables, nullptr) << "the CUDA backend registered no kernel tables";
  EXPECT_EQ(joined(missing_kernels(*tables)), "") << "entries without a CUDA kernel";
  EXPECT_TRUE(device_has_op_kernels(DeviceType::cuda));
}
#else
TEST(DeviceKernels, ACpuOnlyBuildHasNoCudaOps) {
  EXPECT_EQ(find_kernel_tables(DeviceType::cuda), nullptr);
  EXPECT_FALSE(device_has_op_kernels(DeviceType::cuda));
}
#endif

}  // namespace
}  // namespace headroom

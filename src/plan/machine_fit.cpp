// The dry run's peaks against the device's free memory and the host's available memory.
#include "plan/machine_fit.h"

#include "core/error.h"
#include "memory/caching_allocator.h"
#include "memory/device_memory.h"
#include "memory/alloc_config.h"
#include "plan/dry_run.h"
#include "train/model_source.h"

namespace headroom {

void check_run_fits_the_machine(const TrainingArguments& args) {
  const Device device = resolve_device(args.device);
  if (!device.is_cpu() && !device.is_cuda()) return;
  // The peaks of two steps with eval, what metrics.jsonl would log, or the load's if higher
  // (required_bytes).
  const DryRunResult plan = dry_run_training(args);
  const int64_t device_free =
      static_cast<int64_t>(caching_allocator(device).device_memory_info().free);
  const int64_t host_available =
      static_cast<int64_t>(caching_allocator(kCPU).device_memory_info().free);
  const int64_t device_needed = plan.required_bytes();
  // On the CPU the host pool and the device are one memory.
  const int64_t host_needed = plan.host_required_bytes() + (device.is_cpu() ? device_needed : 0);
  auto refuse = [&](const std::string& what, int64_t needed, int64_t available) {
    throw ValueError(str_cat("the run needs ", format_bytes(static_cast<size_t>(needed)), " of ",
                             what,
                             " at its peak (its dry run, as `headroom plan` with these options "
                             "prints it), more than the ",
                             format_bytes(static_cast<size_t>(available)),
                             " available; `headroom plan` with --gpu_memory searches for a "
                             "configuration that fits"));
  };
  if (device.is_cuda() && device_free > 0 && device_needed > device_free) {
    refuse(str_cat(device.str(), " memory"), device_needed, device_free);
  }
  if (host_available > 0 && host_needed > host_available) {
    refuse(device.is_cpu() ? "memory" : "host memory", host_needed, host_available);
  }
}

}  // namespace headroom

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

TrainingArguments find_batch_size(const TrainingArguments& args, std::string* why) {
  const Device device = resolve_device(args.device);
  int64_t capacity = 0;
  if (!args.memory_limit.empty()) {
    capacity = static_cast<int64_t>(parse_byte_size(args.memory_limit, "memory_limit"));
  } else {
    capacity = static_cast<int64_t>(caching_allocator(device).device_memory_info().free);
  }
  const int64_t effective = args.per_device_train_batch_size * args.gradient_accumulation_steps;
  std::string too_big;  // the micro-batches tried that do not fit
  for (int64_t batch = args.per_device_train_batch_size; batch >= 1; --batch) {
    if (effective % batch != 0) continue;
    TrainingArguments candidate = args;
    candidate.per_device_train_batch_size = batch;
    candidate.gradient_accumulation_steps = effective / batch;
    DryRunOptions options;
    options.memory_limit = capacity;
    try {
      const DryRunResult plan = dry_run_training(candidate, options);
      if (why != nullptr) {
        *why = str_cat("auto_find_batch_size: per_device_train_batch_size ",
                       args.per_device_train_batch_size, " -> ", batch,
                       ", gradient_accumulation_steps ", args.gradient_accumulation_steps, " -> ",
                       candidate.gradient_accumulation_steps, " (the effective batch ", effective,
                       " kept); its dry run reserves ",
                       format_bytes(static_cast<size_t>(plan.required_bytes())), " of the ",
                       format_bytes(static_cast<size_t>(capacity)), " the run has",
                       too_big.empty() ? "" : str_cat(" (", too_big, " did not fit)"));
      }
      return candidate;
    } catch (const OutOfMemoryError&) {
      too_big += str_cat(too_big.empty() ? "" : ", ", batch);
    }
  }
  throw ValueError(str_cat("auto_find_batch_size: even a micro-batch of 1 does not fit the ",
                           format_bytes(static_cast<size_t>(capacity)),
                           " the run has (its dry run runs out of memory); `headroom plan` with "
                           "--gpu_memory searches for a configuration that fits"));
}

}  // namespace headroom

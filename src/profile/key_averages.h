// key_averages(): the profiler's scopes grouped by name, with total and self time and memory, and
// the table torch.profiler's key_averages().table() prints of them, column for column.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profile/profiler.h"

namespace headroom {

// torch's FunctionEventAvg. Self time is a scope's time less that of the scopes directly inside
// it on the same thread; a scope's memory is the bytes allocated less those freed while it was
// the innermost scope of the allocating thread (self), or anywhere inside it (total); likewise its
// CUDA time is the device time of the calls launched while it was the innermost scope (self) or
// anywhere inside it (total), Note [CUDA time in the profiler]. A device span's own entry
// (device_type cuda) has CUDA time only, self and total alike.
struct KeyAverage {
  std::string key;
  DeviceType device_type = DeviceType::cpu;  // cuda: a device span's entry
  int64_t count = 0;
  double cpu_time_total_us = 0.0;
  double self_cpu_time_total_us = 0.0;
  double cuda_time_total_us = 0.0;
  double self_cuda_time_total_us = 0.0;
  int64_t cpu_memory_usage = 0;  // bytes on the CPU device
  int64_t self_cpu_memory_usage = 0;
  int64_t cuda_memory_usage = 0;  // bytes on CUDA devices
  int64_t self_cuda_memory_usage = 0;

  double cpu_time_us() const {  // torch's cpu_time: the average per call
    return count == 0 ? 0.0 : cpu_time_total_us / static_cast<double>(count);
  }
  double cuda_time_us() const {  // torch's cuda_time
    return count == 0 ? 0.0 : cuda_time_total_us / static_cast<double>(count);
  }
};

// One entry per scope name (ops, backward nodes, phases, ProfilerStep#N) and one per device span
// name (a kernel-table call, "gemm.gemm"), in the order each first started. Memory of the meta
// device is in no column: it has none.
std::vector<KeyAverage> key_averages(const ProfilerEvents& events);

struct KeyAveragesTableOptions {
  // cpu_time_total, self_cpu_time_total, cpu_time, cuda_time_total, self_cuda_time_total,
  // cuda_time, count, cpu_memory_usage, self_cpu_memory_usage, cuda_memory_usage or
  // self_cuda_memory_usage (torch 2's device_time_total, self_device_time_total and device_time
  // too); largest first.
  std::string sort_by = "cpu_time_total";
  int64_t row_limit = 100;     // torch's default; negative: every row
  bool profile_memory = true;  // the CPU Mem / Self CPU Mem columns (and CUDA's when non-zero)
};

// torch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, [Self CUDA,
// Self CUDA %, CUDA total, CUDA time avg], [CPU Mem, Self CPU Mem, [CUDA Mem, Self CUDA Mem]],
// # of Calls, then "Self CPU time total: ..." and, with CUDA columns, "Self CUDA time total: ..."
// (the device spans' time, the denominator of Self CUDA %). The CUDA time columns appear when
// some entry has device time. Empty for no entries. ValueError naming sort_by for an unknown key.
std::string key_averages_table(std::vector<KeyAverage> averages,
                               const KeyAveragesTableOptions& options = {});

}  // namespace headroom

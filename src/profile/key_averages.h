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
// the innermost scope of the allocating thread (self), or anywhere inside it (total).
struct KeyAverage {
  std::string key;
  int64_t count = 0;
  double cpu_time_total_us = 0.0;
  double self_cpu_time_total_us = 0.0;
  int64_t cpu_memory_usage = 0;  // bytes on the CPU device
  int64_t self_cpu_memory_usage = 0;
  int64_t cuda_memory_usage = 0;  // bytes on CUDA devices
  int64_t self_cuda_memory_usage = 0;

  double cpu_time_us() const {  // torch's cpu_time: the average per call
    return count == 0 ? 0.0 : cpu_time_total_us / static_cast<double>(count);
  }
};

// One entry per scope name (ops, backward nodes, phases, ProfilerStep#N), in the order each name
// first started. Memory of the meta device is in no column: it has none.
std::vector<KeyAverage> key_averages(const ProfilerEvents& events);

struct KeyAveragesTableOptions {
  // cpu_time_total, self_cpu_time_total, cpu_time, count, cpu_memory_usage,
  // self_cpu_memory_usage, cuda_memory_usage or self_cuda_memory_usage; largest first.
  std::string sort_by = "cpu_time_total";
  int64_t row_limit = 100;     // torch's default; negative: every row
  bool profile_memory = true;  // the CPU Mem / Self CPU Mem columns (and CUDA's when non-zero)
};

// torch's table: Name, Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, [CPU Mem,
// Self CPU Mem, [CUDA Mem, Self CUDA Mem]], # of Calls, then "Self CPU time total: ...". Empty
// for no entries. ValueError naming sort_by for an unknown key.
std::string key_averages_table(std::vector<KeyAverage> averages,
                               const KeyAveragesTableOptions& options = {});

}  // namespace headroom

// memory_snapshot(): every device allocator's segments and blocks plus the recorded history, in
// the structure torch.cuda.memory._snapshot() returns, and dump_memory_snapshot(), which writes it
// as the pickle file that https://pytorch.org/memory_viz opens.
#pragma once

#include <string>
#include <vector>

#include "memory/caching_allocator.h"
#include "memory/pickle.h"

namespace headroom {

struct MemorySnapshot {
  // Position i is device i in segments and device_traces (memory_viz selects by position).
  std::vector<Device> devices;
  std::vector<std::string> allocator_settings;  // per device, HEADROOM_ALLOC_CONF syntax
  std::vector<size_t> memory_limits;            // per device, 0 = none
  std::vector<std::vector<SegmentInfo>> segments;
  std::vector<std::vector<TraceEntry>> device_traces;
};

// Of every allocator created so far (cpu, cuda:0, ..., meta).
MemorySnapshot memory_snapshot();

// {"segments": [...], "device_traces": [[...], ...], "allocator_settings": {...},
//  "devices": ["cpu", ...]} with PyTorch's keys; context labels become frames
// {"filename": "headroom", "line": 0, "name": label}, innermost first.
PickleValue memory_snapshot_to_pickle(const MemorySnapshot& snapshot);

// Writes the pickle atomically (temporary file, fsync, rename), creating its directory.
void dump_memory_snapshot(const std::string& path);

}  // namespace headroom

// Where a run's memory went: the allocated peak split by what the memory held at that moment
// (memory/memory_category.h), plus the allocator's slack up to the reserved peak.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "memory/memory_category.h"
#include "memory/slack_report.h"

namespace headroom {

// Note [Memory breakdown at the peak]
// Every allocation is tagged with a category when it is made: parameters (tagged after the model
// is built), gradients (tagged by AccumulateGrad, also when .grad takes over a buffer backward
// made), optimizer_states (the optimizers' lazily created state), activations (whatever a
// forward pass or a checkpointed region's recompute allocates: what autograd saves, the autocast
// casts of the weights), temporaries (the rest: backward's and the optimizer's work buffers, the
// data batch, loss scaling). The allocator keeps the bytes per category and copies them whenever
// allocated memory stands at its peak, so the five add up to peak_allocated exactly (block sizes,
// as allocated_bytes counts them). allocator_slack = peak_reserved - peak_allocated: what the
// caching allocator holds beyond the allocated peak (cached free blocks, split remainders). The
// six add up to peak_reserved, the memory the device must have. The same split comes from a real
// run (memory.json) and from `headroom plan`'s dry run.
struct MemoryBreakdown {
  CategoryBytes at_peak{};
  int64_t allocator_slack = 0;
  int64_t peak_allocated = 0;  // allocated_bytes.all.peak
  int64_t peak_reserved = 0;   // reserved_bytes.all.peak
  // The allocator's state at the reserved peak, which explains the slack (Note [Slack report]).
  ReservedPeakState at_reserved_peak;

  int64_t bytes(MemoryCategory category) const { return at_peak[static_cast<size_t>(category)]; }

  // The device allocator's figures since its last reset_peak_memory_stats.
  static MemoryBreakdown of_device(Device device);

  // {"parameters", "gradients", "optimizer_states", "activations", "temporaries",
  //  "allocator_slack"} in bytes.
  nlohmann::ordered_json breakdown_json() const;
  // breakdown_json() plus peak_allocated_bytes and peak_reserved_bytes.
  nlohmann::ordered_json to_json() const;
  // A table: one line per category with bytes and share of the reserved peak, then the slack
  // report when the slack exceeds 10% of the reserved peak.
  std::string format() const;
};

// memory.json: {"device", "breakdown": to_json(), "slack": {"exceeds_threshold",
// "at_reserved_peak": ReservedPeakState::to_json()}, "memory_stats": memory_stats(device)}.
nlohmann::ordered_json memory_report_json(const MemoryBreakdown& breakdown, Device device);

}  // namespace headroom

// Where a training run's memory went: the peak split into parameters, gradients, optimizer
// states, activations and the rest, from allocator figures the trainer records as it runs.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/device.h"

namespace headroom {

// Note [Memory breakdown at the peak]
// parameters: bytes of the unique parameters (after any dtype change); gradients: bytes of the
// gradients held just before the optimizer step (the largest seen); optimizer_states: bytes of
// the tensors in the optimizer's state_dict at the end. These three coexist at every optimizer
// step, so the peak is at least their sum. activations: the largest growth of allocated memory
// over one micro-batch's forward pass (what autograd saves for backward, the autocast casts of
// the weights included), capped at what the peak leaves after the three; other: the rest of the
// peak (backward's temporaries, the data batch, workspace). The five add up to the peak exactly.
// Backward frees activations while it writes gradients, so at the peak both may be partly there:
// the split is by category, its total is the measured peak.
struct MemoryBreakdown {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_states = 0;
  int64_t activations = 0;
  int64_t other = 0;
  int64_t peak_allocated = 0;  // allocated_bytes.all.peak
  int64_t peak_reserved = 0;   // reserved_bytes.all.peak

  // Caps `activations` and fills `other` from the peak (see the Note).
  void finish();
  nlohmann::ordered_json to_json() const;
  // A table: one line per category with bytes and share of the peak.
  std::string format() const;
};

// memory.json: {"device", "breakdown": to_json(), "memory_stats": memory_stats(device)}.
nlohmann::ordered_json memory_report_json(const MemoryBreakdown& breakdown, Device device);

}  // namespace headroom

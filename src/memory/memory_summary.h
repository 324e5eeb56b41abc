// format_memory_summary: the table torch.cuda.memory_summary() prints, made from a memory_stats
// map, so users read headroom's allocator state in the layout they already know.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace headroom {

// `stats` uses the flattened key names of torch.cuda.memory_stats() ("allocated_bytes.all.current",
// "allocation.large_pool.peak", "oversize_segments.freed", "num_ooms", "num_alloc_retries", ...);
// every key the table shows must be present (ValueError names the first missing one), others are
// ignored. The text is PyTorch's, line for line and unit for unit, except for three wordings:
// the title names the device ("headroom memory summary, device <device_name>"), "CUDA OOMs" is
// "OOMs" and "cudaMalloc retries" is "device alloc retries". `abbreviated` leaves out the
// large/small pool rows, as PyTorch's does.
//
// Lines are 75 characters inside the `|` frame, as PyTorch's are, unless a value is wider than
// its column (PyTorch then widens the line; so do we). A device name over 24 characters takes
// room from the title's left margin, and beyond 41 characters is cut short with "...".
std::string format_memory_summary(const std::map<std::string, int64_t>& stats,
                                  const std::string& device_name, bool abbreviated = false);

}  // namespace headroom

// Why the caching allocator reserves more than is allocated: the allocator's own state at the
// moment its reserved bytes peaked (which free blocks it held and which live allocations kept
// them from serving), and the report `headroom plan` and the end of a run print when that slack
// exceeds 10% of the reserved peak (Note [Slack report]).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "memory/memory_category.h"

namespace headroom {

// Note [Slack report]
// Slack is reserved_bytes.all.peak - allocated_bytes.all.peak. Each time reserved memory
// reaches a new peak (a new segment, or pages mapped into an expandable one), CachingAllocator
// sorts the free bytes it holds at that moment by what keeps them from the request that needed
// more memory:
// - split remainders: free blocks of segments that also hold live blocks. The live blocks
//   strand them: the segment cannot be returned, and the remainder serves only requests that fit
//   it. The live block holding the most of such a segment is named (category, size and, with
//   history recorded, the innermost MemoryContext label), grouped and summed over segments.
// - whole cached segments: segments with nothing allocated, each too small for the request (or
//   of another stream or pool); they were made for requests of other sizes.
// - free space of expandable segments: free blocks inside (or at the partly used last page of)
//   a growing segment (Note [Expandable segments]).
// - blocks freed but waiting for other streams' events.
// The request that raised the peak and what it added (its segment, or the pages mapped) are
// kept too: a segment larger than its request is rounding (20 MiB for requests of 1 to 10 MiB).
// The fix named is expandable_segments:True for the first three kinds of a native allocator (a
// growing segment reuses any free tail and has no per-size segments); with expandable segments
// on, what remains is fragmentation between live blocks and the last page of each pool.

struct StrandingAllocation {
  MemoryCategory category = MemoryCategory::temporaries;
  int64_t block_size = 0;
  std::string label;           // innermost MemoryContext label when history was recorded
  int64_t segments = 0;        // segments it holds (one per live block of this kind)
  int64_t stranded_bytes = 0;  // free bytes of those segments
};

struct ReservedPeakState {
  int64_t reserved = 0;   // reserved_bytes.all at the moment (the peak)
  int64_t allocated = 0;  // allocated_bytes.all then
  int64_t split_remainder_bytes = 0;
  int64_t split_segments = 0;
  int64_t whole_free_segment_bytes = 0;
  int64_t whole_free_segments = 0;
  int64_t expandable_free_bytes = 0;
  int64_t pending_free_bytes = 0;
  int64_t request_bytes = 0;         // the rounded request that raised reserved to the peak
  int64_t added_bytes = 0;           // what that request added to reserved
  bool expandable_segments = false;  // the allocator's policy then
  // The live allocations stranding the most split remainders, most bytes first (at most 3).
  std::vector<StrandingAllocation> stranding;

  nlohmann::ordered_json to_json() const;
};

inline constexpr double kSlackReportThreshold = 0.10;  // of the reserved peak

// Whether slack = peak_reserved - peak_allocated exceeds kSlackReportThreshold of peak_reserved.
bool slack_exceeds_threshold(int64_t peak_allocated, int64_t peak_reserved);

// The report of Note [Slack report]: empty when the slack is within the threshold, else lines
// (each starting with two spaces) saying how large it is, what the free memory at the reserved
// peak was, which allocations strand it, and the option that would remove it.
std::string format_slack_report(const ReservedPeakState& state, int64_t peak_allocated,
                                int64_t peak_reserved);

}  // namespace headroom

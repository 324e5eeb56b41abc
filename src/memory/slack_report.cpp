// The slack report's text and JSON.
#include "memory/slack_report.h"

#include "core/error.h"
#include "memory/alloc_config.h"

namespace headroom {

nlohmann::ordered_json ReservedPeakState::to_json() const {
  nlohmann::ordered_json stranders = nlohmann::ordered_json::array();
  for (const StrandingAllocation& s : stranding) {
    stranders.push_back({{"category", memory_category_name(s.category)},
                         {"block_size", s.block_size},
                         {"label", s.label},
                         {"segments", s.segments},
                         {"stranded_bytes", s.stranded_bytes}});
  }
  return {{"reserved_bytes", reserved},
          {"allocated_bytes", allocated},
          {"split_remainder_bytes", split_remainder_bytes},
          {"split_segments", split_segments},
          {"whole_free_segment_bytes", whole_free_segment_bytes},
          {"whole_free_segments", whole_free_segments},
          {"expandable_free_bytes", expandable_free_bytes},
          {"pending_free_bytes", pending_free_bytes},
          {"request_bytes", request_bytes},
          {"added_bytes", added_bytes},
          {"expandable_segments", expandable_segments},
          {"stranding", stranders}};
}

bool slack_exceeds_threshold(int64_t peak_allocated, int64_t peak_reserved) {
  return peak_reserved > 0 && static_cast<double>(peak_reserved - peak_allocated) >
                                  kSlackReportThreshold * static_cast<double>(peak_reserved);
}

std::string format_slack_report(const ReservedPeakState& state, int64_t peak_allocated,
                                int64_t peak_reserved) {
  if (!slack_exceeds_threshold(peak_allocated, peak_reserved)) return {};
  auto size = [](int64_t bytes) { return format_bytes(static_cast<size_t>(bytes)); };
  const int64_t slack = peak_reserved - peak_allocated;
  std::string text =
      str_cat("  allocator slack ", size(slack), " is ",
              std::to_string(static_cast<int>(
                  100.0 * static_cast<double>(slack) / static_cast<double>(peak_reserved) + 0.5)),
              "% of the reserved peak (over 10%). At the reserved peak ",
              size(state.reserved - state.allocated), " of ", size(state.reserved), " was free:\n");
  if (state.split_remainder_bytes > 0) {
    text += str_cat("    ", size(state.split_remainder_bytes), " in split remainders of ",
                    state.split_segments, state.split_segments == 1 ? " segment" : " segments",
                    ", stranded by the live blocks beside them");
    for (size_t i = 0; i < state.stranding.size(); ++i) {
      const StrandingAllocation& s = state.stranding[i];
      text += str_cat(i == 0 ? ": " : "; ", memory_category_name(s.category), " blocks of ",
                      size(s.block_size), s.label.empty() ? "" : " (" + s.label + ")", " hold ",
                      s.segments, s.segments == 1 ? " segment" : " segments", " with ",
                      size(s.stranded_bytes), " free");
    }
    text += "\n";
  }
  if (state.whole_free_segment_bytes > 0) {
    text += str_cat("    ", size(state.whole_free_segment_bytes), " in ", state.whole_free_segments,
                    state.whole_free_segments == 1 ? " cached segment" : " cached segments",
                    " with nothing allocated, made for requests of other sizes and too small for "
                    "the request that needed more\n");
  }
  if (state.expandable_free_bytes > 0) {
    text += str_cat("    ", size(state.expandable_free_bytes),
                    " free inside the expandable segments (between live blocks and in the last "
                    "mapped page)\n");
  }
  if (state.pending_free_bytes > 0) {
    text += str_cat("    ", size(state.pending_free_bytes),
                    " freed but waiting for other streams (record_stream)\n");
  }
  if (state.request_bytes > 0) {
    text +=
        str_cat("    the peak was raised by a request of ", size(state.request_bytes),
                ", which added ", size(state.added_bytes),
                state.added_bytes > state.request_bytes ? " (the segment's rounding)" : "", "\n");
  }
  if (!state.expandable_segments) {
    text +=
        "  fix: expandable segments (--expandable_segments, or HEADROOM_ALLOC_CONF="
        "expandable_segments:True) grow one segment per stream and pool, so free tails are "
        "reused and no segment is cached per request size\n";
  } else {
    text +=
        "  expandable segments are on: what remains is free space between live blocks and "
        "the last mapped page of each pool (20 MiB large, 2 MiB small); no allocator option "
        "removes it\n";
  }
  return text;
}

}  // namespace headroom

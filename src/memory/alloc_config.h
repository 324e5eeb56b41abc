// The caching allocator's tuning knobs, named as PYTORCH_CUDA_ALLOC_CONF's and read from
// HEADROOM_ALLOC_CONF ("max_split_size_mb:128,expandable_segments:True"), or from
// PYTORCH_CUDA_ALLOC_CONF itself when that is unset, and the capacity limit read from
// HEADROOM_MEMORY_LIMIT ("24GiB").
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace headroom {

struct AllocatorConfig {
  // Blocks at least this large are never split (and not reused for smaller requests).
  size_t max_split_size = std::numeric_limits<size_t>::max();
  // An oversize request may take a cached block at most this much larger.
  size_t max_non_split_rounding_size = 20u << 20;
  // With a capacity limit: when reserved memory exceeds this fraction of it, cached blocks that
  // have waited longest for reuse are returned before asking the device for more. 0 = off.
  double garbage_collection_threshold = 0.0;
  // Round requests up to one of this many steps between powers of two (0 or 1 = off).
  size_t roundup_power2_divisions = 0;
  // One growing virtual segment per stream and pool, mapped and unmapped in pages, instead of a
  // segment per cudaMalloc (Note [Expandable segments] in memory/caching_allocator.h).
  bool expandable_segments = false;

  // Parses the PYTORCH_CUDA_ALLOC_CONF syntax; ValueError names the key, its value and the
  // accepted range. backend is recognised and refused unless native.
  static AllocatorConfig parse(std::string_view text, const char* source = "HEADROOM_ALLOC_CONF");
  // From HEADROOM_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF (a user's PyTorch setting carries
  // over), else the defaults.
  static AllocatorConfig from_env();

  std::string str() const;  // the same syntax, for snapshots and reports
};

// "24GiB", "512MiB", "1.5GB", "80G", "1048576": binary units (KiB, MiB, GiB, TiB and the short
// K, M, G, T), decimal ones (KB, MB, GB, TB) and bytes (B or none). ValueError names `what`.
size_t parse_byte_size(std::string_view text, const char* what);

// The byte limit from HEADROOM_MEMORY_LIMIT, 0 when unset.
size_t memory_limit_from_env();

// As PyTorch formats sizes in its OOM message: "512 bytes", "1.50 KiB", "20.00 MiB", "2.00 GiB".
std::string format_bytes(size_t size);

}  // namespace headroom

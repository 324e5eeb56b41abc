// Resetting and flattening of DeviceStats.
#include "memory/memory_stats.h"

namespace headroom {

void DeviceStats::reset_accumulated() {
#define HEADROOM_RESET_POOL(name, unit) \
  for (Stat & s : name) s.reset_accumulated();
  HEADROOM_POOL_STATS(HEADROOM_RESET_POOL)
#undef HEADROOM_RESET_POOL
#define HEADROOM_RESET_SINGLE(name, unit) name.reset_accumulated();
  HEADROOM_SINGLE_STATS(HEADROOM_RESET_SINGLE)
#undef HEADROOM_RESET_SINGLE
#define HEADROOM_RESET_COUNTER(name) name = 0;
  HEADROOM_COUNTERS(HEADROOM_RESET_COUNTER)
#undef HEADROOM_RESET_COUNTER
}

void DeviceStats::reset_peak() {
#define HEADROOM_RESET_POOL(name, unit) \
  for (Stat & s : name) s.reset_peak();
  HEADROOM_POOL_STATS(HEADROOM_RESET_POOL)
#undef HEADROOM_RESET_POOL
#define HEADROOM_RESET_SINGLE(name, unit) name.reset_peak();
  HEADROOM_SINGLE_STATS(HEADROOM_RESET_SINGLE)
#undef HEADROOM_RESET_SINGLE
  category_at_peak = category_current;
}

namespace {

void put(std::map<std::string, int64_t>& out, const std::string& prefix, const Stat& s) {
  out[prefix + ".current"] = s.current;
  out[prefix + ".peak"] = s.peak;
  out[prefix + ".allocated"] = s.allocated;
  out[prefix + ".freed"] = s.freed;
}

}  // namespace

std::map<std::string, int64_t> DeviceStats::to_map() const {
  std::map<std::string, int64_t> out;
#define HEADROOM_PUT_POOL(name, unit) \
  for (int t = 0; t < 3; ++t) put(out, std::string(#name) + "." + kStatTypeNames[t], name[t]);
  HEADROOM_POOL_STATS(HEADROOM_PUT_POOL)
#undef HEADROOM_PUT_POOL
#define HEADROOM_PUT_SINGLE(name, unit) put(out, #name, name);
  HEADROOM_SINGLE_STATS(HEADROOM_PUT_SINGLE)
#undef HEADROOM_PUT_SINGLE
#define HEADROOM_PUT_COUNTER(name) out[#name] = name;
  HEADROOM_COUNTERS(HEADROOM_PUT_COUNTER)
#undef HEADROOM_PUT_COUNTER
  out["max_split_size"] = max_split_size;
  return out;
}

}  // namespace headroom

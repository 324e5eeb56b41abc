// Autocast: the policy table and the thread-local cast cache.
#include "ops/autocast.h"

#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/autograd_meta.h"
#include "core/autocast_mode.h"
#include "core/grad_mode.h"
#include "ops/cast.h"

namespace headroom {

namespace {

// Note [Autocast policy]: one row per op that exists, under the name it passes to
// autocast_inputs.
const std::unordered_map<std::string_view, AutocastPolicy>& policy_table() {
  static const std::unordered_map<std::string_view, AutocastPolicy> table = {
      {"linear", AutocastPolicy::lower_precision},
      {"matmul", AutocastPolicy::lower_precision},
      {"scaled_dot_product_attention", AutocastPolicy::lower_precision},
      {"linear_cross_entropy", AutocastPolicy::lower_precision},
      {"softmax", AutocastPolicy::fp32},
      {"layer_norm", AutocastPolicy::fp32},
      {"rms_norm", AutocastPolicy::fp32},
      {"cross_entropy", AutocastPolicy::fp32},
      {"sum", AutocastPolicy::fp32},
      {"mean", AutocastPolicy::fp32},
      {"add", AutocastPolicy::promote},
      {"sub", AutocastPolicy::promote},
      {"mul", AutocastPolicy::promote},
      {"swiglu", AutocastPolicy::promote},
  };
  return table;
}

// Keyed by the parameter's autograd identity (shared by every handle of it), the target dtype
// and whether the cast was recorded with grad: a cast made under no_grad has no ToCopyBackward
// and must not be handed to a later use that needs one.
using CacheKey = std::tuple<const AutogradMeta*, DType, bool>;
struct CacheEntry {
  Tensor source;  // kept alive so that its identity cannot be reused while the entry exists
  Tensor cast;
};

// Entries are kept, and freed by clear(), in the order the casts were made: a cast that no
// saved tensor holds (a bias) is freed when the region exits, and an order that followed the
// keys' heap addresses would differ from run to run and between the CPU and a dry run on the
// meta device, and with it the allocator's cache (plan/: the reserved bytes).
struct CastCache {
  std::map<CacheKey, size_t> index;  // into entries
  std::vector<CacheEntry> entries;
  int64_t hits = 0;
  int64_t misses = 0;

  void clear() {
    for (CacheEntry& entry : entries) entry = CacheEntry{};
    entries.clear();
    index.clear();
  }
};

CastCache& cast_cache() {
  thread_local CastCache cache;
  return cache;
}

bool cacheable(const Tensor& t, DType target, const AutocastDeviceState& state) {
  return state.cache_enabled && AutocastMode::nesting() > 0 && t.dtype() == DType::f32 &&
         target != DType::f32 && t.requires_grad() && t.is_leaf();
}

Tensor cached_cast(const Tensor& t, DType target, const AutocastDeviceState& state) {
  if (!cacheable(t, target, state)) return cast(t, target);
  CastCache& cache = cast_cache();
  const CacheKey key{t.autograd_meta(), target, GradMode::is_enabled()};
  if (auto it = cache.index.find(key); it != cache.index.end()) {
    ++cache.hits;
    return cache.entries[it->second].cast;
  }
  ++cache.misses;
  Tensor out = cast(t, target);
  cache.index.emplace(key, cache.entries.size());
  cache.entries.push_back(CacheEntry{t, out});
  return out;
}

}  // namespace

std::optional<AutocastPolicy> autocast_policy(std::string_view op) {
  const auto& table = policy_table();
  if (auto it = table.find(op); it != table.end()) return it->second;
  return std::nullopt;
}

std::optional<std::vector<Tensor>> autocast_inputs(std::string_view op,
                                                   const std::vector<Tensor>& inputs) {
  if (!AutocastMode::any_enabled()) return std::nullopt;
  const Tensor* first = nullptr;
  for (const Tensor& t : inputs) {
    if (t.defined()) {
      first = &t;
      break;
    }
  }
  if (!first) return std::nullopt;
  const AutocastDeviceState state = AutocastMode::get(first->device().type);
  if (!state.enabled) return std::nullopt;
  const std::optional<AutocastPolicy> policy = autocast_policy(op);
  if (!policy || *policy == AutocastPolicy::promote) return std::nullopt;
  const DType target = *policy == AutocastPolicy::fp32 ? DType::f32 : state.dtype;
  bool changes = false;
  for (const Tensor& t : inputs) {
    changes |= t.defined() && is_floating(t.dtype()) && t.dtype() != target;
  }
  if (!changes) return std::nullopt;
  std::vector<Tensor> out;
  out.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    out.push_back(t.defined() && is_floating(t.dtype()) && t.dtype() != target
                      ? cached_cast(t, target, state)
                      : t);
  }
  return out;
}

std::optional<DType> autocast_input_dtype(std::string_view op, Device device) {
  if (!AutocastMode::any_enabled()) return std::nullopt;
  const AutocastDeviceState state = AutocastMode::get(device.type);
  if (!state.enabled) return std::nullopt;
  const std::optional<AutocastPolicy> policy = autocast_policy(op);
  if (!policy || *policy == AutocastPolicy::promote) return std::nullopt;
  return *policy == AutocastPolicy::fp32 ? DType::f32 : state.dtype;
}

void prefetch_autocast_casts(const std::vector<Tensor>& tensors) {
  if (!AutocastMode::any_enabled() || tensors.empty()) return;
  const AutocastDeviceState state = AutocastMode::get(tensors.front().device().type);
  if (!state.enabled) return;
  CastCache& cache = cast_cache();
  std::vector<Tensor> sources;
  for (const Tensor& t : tensors) {
    if (!t.defined() || t.device() != tensors.front().device() || !t.is_contiguous() ||
        !cacheable(t, state.dtype, state)) {
      continue;
    }
    const CacheKey key{t.autograd_meta(), state.dtype, GradMode::is_enabled()};
    if (cache.index.count(key)) continue;
    bool repeated = false;  // a tensor listed twice (tied weights) is cast once
    for (const Tensor& s : sources) repeated |= s.autograd_meta() == t.autograd_meta();
    if (!repeated) sources.push_back(t);
  }
  const std::vector<Tensor> casts = cast_all(sources, state.dtype);
  for (size_t i = 0; i < sources.size(); ++i) {
    ++cache.misses;
    cache.index.emplace(CacheKey{sources[i].autograd_meta(), state.dtype, GradMode::is_enabled()},
                        cache.entries.size());
    cache.entries.push_back(CacheEntry{sources[i], casts[i]});
  }
}

std::vector<Tensor> autocast_cached_sources() {
  std::vector<Tensor> sources;
  for (const CacheEntry& entry : cast_cache().entries) sources.push_back(entry.source);
  return sources;
}

AutocastCacheStats autocast_cache_stats() {
  const CastCache& cache = cast_cache();
  AutocastCacheStats stats{.hits = cache.hits, .misses = cache.misses};
  for (const CacheEntry& entry : cache.entries) {
    ++stats.entries;
    stats.bytes += entry.cast.nbytes();
  }
  return stats;
}

void clear_autocast_cache() { cast_cache().clear(); }

}  // namespace headroom

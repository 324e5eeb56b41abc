// The kernel census (core/kernel_census.h).
#include "core/kernel_census.h"

#include <mutex>
#include <utility>

#include "core/tensor.h"

namespace headroom {
namespace detail {

std::atomic<KernelCensus*> g_kernel_census{nullptr};

namespace {
std::mutex& census_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

void record_launch(KernelLaunch launch) {
  std::lock_guard<std::mutex> lock(census_mutex());
  if (KernelCensus* census = g_kernel_census.load(std::memory_order_relaxed)) {
    census->record(std::move(launch));
  }
}

}  // namespace detail

void KernelCensus::record(KernelLaunch launch) { launches_.push_back(std::move(launch)); }

KernelCensusScope::KernelCensusScope(KernelCensus& census)
    : previous_(detail::g_kernel_census.exchange(&census)) {}

KernelCensusScope::~KernelCensusScope() { detail::g_kernel_census.store(previous_); }

void census_micro_batch_begins() {
  if (!kernel_census_open()) return;
  std::lock_guard<std::mutex> lock(detail::census_mutex());
  if (KernelCensus* census = detail::g_kernel_census.load()) census->mark_micro_batch();
}

void census_micro_batches_end() {
  if (!kernel_census_open()) return;
  std::lock_guard<std::mutex> lock(detail::census_mutex());
  if (KernelCensus* census = detail::g_kernel_census.load()) census->mark_micro_batches_end();
}

void count_tensor_kernel(const char* family, const char* entry, Device device, int64_t bytes,
                         bool host_sync, bool strided_copy) {
  if (!kernel_census_open()) return;
  KernelLaunch launch;
  launch.family = family;
  launch.entry = entry;
  launch.device = device;
  launch.work.bytes = bytes;
  launch.host_sync = host_sync;
  launch.strided_copy = strided_copy;
  detail::record_launch(std::move(launch));
}

bool has_strided_layout(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return false;
  int wide = 0;
  for (int64_t size : t.shape()) wide += size > 1;
  return wide >= 2;
}

void count_skipped_host_read(const Tensor& t) {
  if (!kernel_census_open() || !t.defined() || !t.device().is_meta()) return;
  count_tensor_kernel("transfer", "device_to_host", t.device(), static_cast<int64_t>(t.nbytes()),
                      /*host_sync=*/true);
}

}  // namespace headroom

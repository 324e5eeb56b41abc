// The kernel census: every kernel-table call, Tensor copy, cast and host <-> device transfer
// while a census is open, with the bytes it moves, its FLOPs and whether it makes the host wait.
// It counts on every device, the meta device included, so a GPU step's launches are known on a
// machine without a GPU (DESIGN.md principle 9). See Note [Kernel census].
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"

namespace headroom {

class Tensor;

// Note [Kernel census]
// What one launch does, as a roofline sees it: bytes moved (each tensor argument read or written
// once, unless its family's cost function says more exactly: a GEMM that accumulates reads C
// too) and FLOPs (counted for the families whose time can be compute-bound: GEMMs and
// attention; the rest are charged their bytes). A kernel entry that returns a value to its
// caller makes the host wait for the device (a host sync) on a device with queues; so does a
// copy to the host, a copy from pageable host memory (cudaMemcpy from unpinned memory returns
// only when the copy is done), and a read of a value that the meta device, having none, skips
// (count_skipped_host_read). A strided copy is a copy, not a transfer, where the source or the
// destination is not contiguous and has two or more dimensions larger than one: the transposes
// and gathers that a layout needing none avoids.
enum class FlopPrecision : uint8_t { none, fp32, sixteen_bit, fp8 };

struct KernelWork {
  int64_t bytes = 0;  // read + written
  double flops = 0.0;
  FlopPrecision precision = FlopPrecision::none;
  std::string shape;  // for the table's GEMM rows: "m x n x k" and the epilogue
};

struct KernelLaunch {
  const char* family = "";  // "gemm", "norm", ... or "copy", "cast", "transfer" for Tensor kernels
  const char* entry = "";
  Device device;
  KernelWork work;
  bool host_sync = false;
  bool strided_copy = false;
};

// The launches seen while it was open, in order, and where each micro-batch of a training step
// began (mark_micro_batch): a plan that dry-runs two micro-batches of N knows what the other
// N - 2 launch.
class KernelCensus {
 public:
  void record(KernelLaunch launch);
  void mark_micro_batch() { micro_batch_starts_.push_back(launches_.size()); }
  const std::vector<KernelLaunch>& launches() const { return launches_; }
  // Indexes into launches(): the first launch of each micro-batch; the end of the last one is
  // the next mark, or the end of the census's micro-batch loop (mark_micro_batches_end).
  const std::vector<size_t>& micro_batch_starts() const { return micro_batch_starts_; }
  void mark_micro_batches_end() { micro_batches_end_ = launches_.size(); }
  size_t micro_batches_end() const { return micro_batches_end_; }
  void clear() {
    launches_.clear();
    micro_batch_starts_.clear();
    micro_batches_end_ = 0;
  }

 private:
  std::vector<KernelLaunch> launches_;
  std::vector<size_t> micro_batch_starts_;
  size_t micro_batches_end_ = 0;
};

namespace detail {
extern std::atomic<KernelCensus*> g_kernel_census;
void record_launch(KernelLaunch launch);
}  // namespace detail

// Whether a census is open: one relaxed load, so every launch can ask.
inline bool kernel_census_open() {
  return detail::g_kernel_census.load(std::memory_order_relaxed) != nullptr;
}

// Opens `census` for its lifetime (one at a time, process-wide: the steps it counts launch from
// one thread, and the data loader's workers launch none).
class KernelCensusScope {
 public:
  explicit KernelCensusScope(KernelCensus& census);
  ~KernelCensusScope();
  KernelCensusScope(const KernelCensusScope&) = delete;
  KernelCensusScope& operator=(const KernelCensusScope&) = delete;

 private:
  KernelCensus* previous_;
};

// A training step's micro-batch begins, or its micro-batches end (before the optimizer's work):
// marks for an open census, nothing otherwise.
void census_micro_batch_begins();
void census_micro_batches_end();

// Counts a launch of a Tensor kernel (fill, copy, ...) on `device` moving `bytes`.
void count_tensor_kernel(const char* family, const char* entry, Device device, int64_t bytes,
                         bool host_sync = false, bool strided_copy = false);

// Whether a copy reading or writing `t` is a strided copy (Note [Kernel census]): not contiguous,
// with two or more dimensions larger than one.
bool has_strided_layout(const Tensor& t);

// A read of `t`'s values by the host that the caller skips on the meta device (no values there):
// counted as the transfer and host sync it is on a GPU. On other devices the copy counts itself.
void count_skipped_host_read(const Tensor& t);

}  // namespace headroom

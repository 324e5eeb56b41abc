// One entry of a backend's op kernel tables, and what every table of entries can do: report its
// missing entries by name, turn into the meta device's no-op table. The tables themselves, one per
// op family, sit beside their family (backend/<family>_kernels.h); backend/backend.h gathers them
// and registers a backend's allocator, tensor kernels and kernel tables together.
#pragma once

#include <algorithm>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/device_activity.h"
#include "core/kernel_census.h"
#include "core/tensor.h"

namespace headroom {

// Note [Kernel tables]
// An op calls its kernels through its family's table on the tensors' device, the way ggml's
// ggml-backend-impl.h lists a backend's entries. A family is a struct of Kernel<Signature>
// members and nothing else (static constants and nested types are fine: they take no room), with
// a static kName:
//
//   struct SoftmaxKernels {
//     static constexpr const char* kName = "softmax";
//     // out = softmax over the middle dimension of x [outer, n, inner].
//     Kernel<void(const Tensor& x, int64_t outer, int64_t n, int64_t inner,
//                 const Tensor& out)> forward{"forward"};
//     // (optional) ...; without it, the op runs forward and then scales.
//     Kernel<...> forward_scaled{"forward_scaled", "the op runs forward, then scales"};
//   };
//
// The string is the member's name, so that a missing entry is reported as "softmax.forward"
// (never by position). An entry is required unless its second string says what happens without
// it; an op tests an optional entry (`if (kernel)`) before calling it. Unless an entry says
// otherwise, tensors are on the table's device, in their own dtypes, and every buffer an entry
// needs (outputs, statistics, workspaces) is allocated by the op with Tensor::empty and passed in,
// never allocated inside a kernel, so that the meta device sees the same bytes; an undefined
// tensor means "no such result".
//
// To add an entry: declare the member in its family's header with what it computes, and set it in
// each backend's fill function of that family (`kernels.forward = softmax_forward;`). To add a
// family: a header backend/<family>_kernels.h with the struct, its type in KernelTables
// (backend/backend.h), and in each backend a fill function (declared in
// backend/<device>/backend_parts.h, defined in the family's kernel file) called by the backend's
// registration. The meta device's no-op table, the missing-entry errors and the completeness test
// (tests/core/test_device_kernels.cpp) follow by themselves.

// Note [Kernel costs]
// Every call of an entry is counted by an open kernel census (Note [Kernel census] in
// core/kernel_census.h) on whatever device it runs, meta included. By default a call moves each
// defined tensor argument's bytes once and does no FLOPs that a roofline would see; an entry
// whose work is more (a GEMM's FLOPs, attention's) sets `cost` to a function of its own
// signature: `gemm{"gemm", nullptr, gemm_cost}`. An entry that returns a value hands it to the
// host, which waits for it: a host sync.

// Note [Tensor lists]
// An entry that takes a TensorList does one launch for all of its tensors, as torch's _foreach
// kernels do (multi_tensor_apply): a CUDA launch carries the list's pointers and sizes in its
// parameters, which hold up to 32 KiB (CUDA 12.1 on Volta and later), so one call takes at most
// kTensorListCapacity tensors and an op with more calls once per slice (for_each_list_slice).
// The op slices on every device, so the census counts the launches a GPU makes. Parallel lists
// of one call (parameters, gradients, states) have one length; an undefined tensor in an
// optional list means "none for this tensor".
using TensorList = std::span<const Tensor>;
inline constexpr size_t kTensorListCapacity = 256;

// fn(begin, count) for consecutive slices [begin, begin + count) of at most kTensorListCapacity
// of `size` tensors.
template <typename Fn>
void for_each_list_slice(size_t size, Fn fn) {
  for (size_t begin = 0; begin < size; begin += kTensorListCapacity) {
    fn(begin, std::min(kTensorListCapacity, size - begin));
  }
}

namespace kernel_table_detail {

// The census's view of one argument: the bytes of a tensor (and of an operand struct's tensors),
// the device of the first tensor.
struct ArgumentBytes {
  KernelWork work;
  Device device = kCPU;
  bool has_device = false;
  void add(const Tensor& t) {
    if (!t.defined()) return;
    work.bytes += static_cast<int64_t>(t.nbytes());
    if (!has_device) device = t.device(), has_device = true;
  }
  void add(TensorList list) {
    for (const Tensor& t : list) add(t);
  }
  template <typename T>
  void add(const T& value) {
    if constexpr (requires {
                    value.packed;
                    value.absmax;
                  }) {
      add(value.packed), add(value.absmax);
    }
  }
};

template <typename R, typename... Args>
void count_launch(const char* family, const char* entry, KernelWork (*cost)(Args...),
                  const Args&... args) {
  ArgumentBytes seen;
  (seen.add(args), ...);
  KernelLaunch launch;
  launch.family = family ? family : "";
  launch.entry = entry;
  launch.device = seen.device;
  launch.work = cost ? cost(args...) : std::move(seen.work);
  launch.host_sync = !std::is_void_v<R>;
  detail::record_launch(std::move(launch));
}

}  // namespace kernel_table_detail

// One entry: the kernel, its name, and what happens without it when it is optional.
template <typename Signature>
struct Kernel;

template <typename R, typename... Args>
struct Kernel<R(Args...)> {
  using Fn = R (*)(Args...);
  using Cost = KernelWork (*)(Args...);

  const char* name;
  // Null for a required entry; for an optional one, what the op does when it is absent.
  const char* without = nullptr;
  // The census's figures for a call (Note [Kernel costs]); null: its tensors' bytes.
  Cost cost = nullptr;
  // The family's kName, set when a backend registers its tables (backend/backend.h).
  const char* family = nullptr;
  Fn fn = nullptr;
  // The meta device's entry: meta tensors have no data, so nothing to compute.
  Fn noop = [](Args...) -> R {
    if constexpr (!std::is_void_v<R>) return R{};
  };

  Kernel& operator=(Fn kernel) {
    fn = kernel;
    return *this;
  }
  explicit operator bool() const { return fn != nullptr; }
  R operator()(Args... args) const {
    if (kernel_census_open()) [[unlikely]] {
      kernel_table_detail::count_launch<R, Args...>(family, name, cost, args...);
    }
    // A profiler recording device time (Note [CUDA time in the profiler]): the call is one span.
    if (kernel_launch_timer_open()) [[unlikely]] {
      kernel_table_detail::ArgumentBytes seen;
      (seen.add(args), ...);
      const KernelLaunchTiming timing(family ? family : "", name, seen.device);
      return fn(std::forward<Args>(args)...);
    }
    return fn(std::forward<Args>(args)...);
  }
};

// Any Kernel<...> seen without its signature: every one has this layout.
struct ErasedKernel {
  const char* name;
  const char* without;
  void (*cost)();
  const char* family;
  void (*fn)();
  void (*noop)();
};

namespace kernel_table_detail {

template <typename Family>
constexpr size_t entry_count() {
  static_assert(std::is_standard_layout_v<Family> && std::is_trivially_copyable_v<Family>,
                "a kernel family holds Kernel<...> members only (Note [Kernel tables])");
  if constexpr (std::is_empty_v<Family>) {
    return 0;
  } else {
    static_assert(sizeof(Family) % sizeof(ErasedKernel) == 0,
                  "a kernel family holds Kernel<...> members only (Note "
                  "[Kernel tables])");
    return sizeof(Family) / sizeof(ErasedKernel);
  }
}

}  // namespace kernel_table_detail

// The family's entries in declaration order.
template <typename Family>
std::vector<ErasedKernel> kernel_entries(const Family& family) {
  std::vector<ErasedKernel> entries(kernel_table_detail::entry_count<Family>());
  if (!entries.empty()) std::memcpy(entries.data(), &family, sizeof(Family));
  return entries;
}

// "family.entry" for each required entry that has no kernel.
template <typename Family>
std::vector<std::string> missing_kernels(const Family& family) {
  std::vector<std::string> missing;
  for (const ErasedKernel& e : kernel_entries(family)) {
    if (!e.fn && !e.without) missing.push_back(std::string(Family::kName) + "." + e.name);
  }
  return missing;
}

// The family with every entry a no-op (the meta device's table).
template <typename Family>
Family noop_kernels() {
  Family family{};
  std::vector<ErasedKernel> entries = kernel_entries(family);
  if (entries.empty()) return family;
  for (ErasedKernel& e : entries) e.fn = e.noop;
  std::memcpy(static_cast<void*>(&family), entries.data(), sizeof(Family));
  return family;
}

// The family with each entry's `family` set to its kName (what the census reports).
template <typename Family>
Family named_kernels(Family family) {
  std::vector<ErasedKernel> entries = kernel_entries(family);
  if (entries.empty()) return family;
  for (ErasedKernel& e : entries) e.family = Family::kName;
  std::memcpy(static_cast<void*>(&family), entries.data(), sizeof(Family));
  return family;
}

// The table of the family whose type is `family` on `type`, or null when no backend registered
// one (backend/backend.h).
const void* find_kernel_family(DeviceType type, const std::type_info& family);

// The family's table of `type`, or null when no backend registered one.
template <typename Family>
const Family* find_kernels(DeviceType type) {
  return static_cast<const Family*>(find_kernel_family(type, typeid(Family)));
}

[[noreturn]] void throw_missing_kernel(const char* op, Device device, const char* family,
                                       const char* entry);

// The entry `entry` of the family's table on `device`, or NotImplementedError naming the op, the
// entry and the device when its backend has no such kernel.
template <typename Family, typename Signature>
const Kernel<Signature>& need_kernel(const char* op, Device device,
                                     Kernel<Signature> Family::*entry) {
  if (const Family* family = find_kernels<Family>(device.type)) {
    const Kernel<Signature>& kernel = family->*entry;
    if (kernel) return kernel;
  }
  static const Family kNames{};
  throw_missing_kernel(op, device, Family::kName, (kNames.*entry).name);
}

}  // namespace headroom

// The small set of kernels the Tensor class itself needs from a device backend (fill, copy,
// arange, random draws, transfers). Each backend registers one table for its device type; ops
// proper live in ops/ and the backends' own files. Entries marked optional may be null.
#pragma once

#include "core/device.h"
#include "core/float_formats.h"
#include "core/philox.h"

namespace headroom {

class Tensor;

struct DeviceKernels {
  // dst = value, converted to dst's dtype. dst may be strided.
  void (*fill)(const Tensor& dst, double value) = nullptr;
  // dst = src element by element, converting dtypes; same device and shape, both may be strided
  // (src may have zero strides from expand). `overflow` decides what values beyond a narrower
  // floating format's range become (see float_formats.h).
  void (*copy)(const Tensor& dst, const Tensor& src, Overflow overflow) = nullptr;
  // dst += src for a contiguous floating dst; src has dst's shape, any strides and floating
  // dtype, and is converted to fp32 and added in fp32 (gradient accumulation).
  void (*accumulate)(const Tensor& dst, const Tensor& src) = nullptr;
  // dst[i] = start + i * step for a contiguous dst.
  void (*arange)(const Tensor& dst, double start, double step) = nullptr;
  // Random draws into a contiguous floating dst; see Note [Philox stream layout].
  void (*uniform)(const Tensor& dst, PhiloxState rng, double low, double high) = nullptr;
  void (*normal)(const Tensor& dst, PhiloxState rng, double mean, double std) = nullptr;
  // (optional) Transfers between this device and the CPU for contiguous tensors of the same
  // dtype and size. Without them, moving tensors between this device and the CPU throws.
  void (*copy_from_cpu)(const Tensor& dst, const Tensor& cpu_src) = nullptr;
  void (*copy_to_cpu)(const Tensor& cpu_dst, const Tensor& src) = nullptr;
  // (optional) The same queued on the device's current stream, returning before they have run:
  // the CPU side is page-locked memory that the caller keeps alive, and does not read or
  // reuse, until the stream has run the copy (Tensor::copy_async_).
  void (*copy_from_cpu_async)(const Tensor& dst, const Tensor& cpu_src) = nullptr;
  void (*copy_to_cpu_async)(const Tensor& cpu_dst, const Tensor& src) = nullptr;
  // (optional) Waits until the device's queued work is done; null means kernels are synchronous.
  void (*synchronize)(int device_index) = nullptr;
  // (optional) How many devices of this type are present; null means exactly one.
  int (*device_count)() = nullptr;
  // Whether the ops of ops/ run on this device type (Note [Devices that compute the ops]).
  // false, the default: only the kernels above exist.
  bool has_op_kernels = false;
};

// Note [Devices that compute the ops]
// A backend can register the Tensor kernels above before the ops have kernels for its device:
// then it allocates, fills, copies and draws, but every op throws "<op> has no kernel for
// <device> yet" (need_kernel, backend/kernel_table.h). has_op_kernels says which state a backend is
// in, so that callers choosing a device can ask instead of failing at the first op: device "auto"
// (train/model_source.h) takes the GPU only when its backend has op kernels. The CPU and meta
// (whose ops allocate and compute nothing) have them; the CUDA backend has them when its
// kernel tables (backend/backend.h) are complete. tests/core/test_device_kernels.cpp checks
// that the flag and the ops' dispatch agree.

void register_device_kernels(DeviceType type, const DeviceKernels* kernels);

// Null when no backend registered kernels for `type` (e.g. cuda in a CPU-only build).
const DeviceKernels* find_device_kernels(DeviceType type);

// True when a backend registered kernels for `type` with has_op_kernels set (Note [Devices that
// compute the ops]); false for a device type without a backend.
bool device_has_op_kernels(DeviceType type);

// Throws NotImplementedError naming the device when no backend is registered.
const DeviceKernels& device_kernels(Device device);

}  // namespace headroom

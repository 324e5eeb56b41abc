// The profiler's events as a Chrome trace, {"traceEvents": [...]} in the Trace Event Format's
// JSON object form, which Perfetto (ui.perfetto.dev) and chrome://tracing open. Names,
// categories and args follow torch.profiler's export_chrome_trace, so tools written for
// PyTorch's traces read ours.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "profile/profiler.h"

namespace headroom {

// Ops and backward nodes: {"ph": "X", "cat": "cpu_op", "name", "pid", "tid", "ts", "dur",
//   "args": {"Input Dims", "Input type"}}; phases and ProfilerStep#N: "cat": "user_annotation";
// allocations: {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]",
//   "args": {"Device Type", "Device Id", "Addr", "Bytes", "Total Allocated", "Total Reserved",
//   "Category"}} with PyTorch's device type numbers (c10::DeviceType: CPU 0, CUDA 1, Meta 14)
//   and device id -1 for the CPU and meta, as PyTorch writes them;
// device activity: {"ph": "X", "cat": "kernel", "pid": device index, "tid": stream,
//   "args": {"device", "stream", "correlation"}}, a row per stream named by "M" events
//   ("GPU <index>", "stream <id>"), and for each launch with a correlation id a flow arrow
//   ("ph" "s" then "f", "cat" "ac2g", "id" correlation) from the launching host thread at its
//   launch time to the kernel, as Kineto links cudaLaunchKernel to its kernel.
// Times are microseconds of the steady clock with nanosecond fractions; events are in time order.
nlohmann::ordered_json chrome_trace(const ProfilerEvents& events);

// Writes chrome_trace(events) to `path` atomically (temporary file, fsync, rename); Error naming
// the path when it cannot.
void write_chrome_trace(const ProfilerEvents& events, const std::string& path);

}  // namespace headroom

#!/usr/bin/python3
"""Writes the profiler's fixtures, so that tests/profile/ checks headroom's profiler against
torch.profiler without needing Python:

tests/fixtures/profile/schedule_golden.txt: for a set of schedules, torch.profiler.schedule's
action at each step, and the ProfilerStep#N scopes torch.profiler.profile records over a run of
that many steps (the loop `work; prof.step()`, then the profiler stops). torch 1.13's step() names
the scope it opens after the step it closes ("ProfilerStep#" + str(cur_step), an off-by-one that
torch 2 fixed to str(self.step_num)); this script runs 1.13's profiler with torch 2's step(), so
ProfilerStep#N is step N as headroom names it. Debian's torch has no Kineto, so the legacy
profiler records; which steps it records is the same state machine.

  schedule <wait> <warmup> <active> <repeat> <skip_first> <steps>
  actions <action of step 0> ... <action of step <steps>>
  recorded <N of each ProfilerStep#N in the traces, ascending>

tests/fixtures/profile/key_averages_golden.txt: a hand-made set of scopes and allocations on two
threads, and the tables that torch's key_averages().table() prints of them. The scopes become
torch FunctionEvents whose cpu_memory_usage / cuda_memory_usage are the bytes allocated less freed
inside them ([start, end] on their thread), as torch's profiler fills them; torch nests them
(EventList._build_tree) and derives self time and self memory.

  function <thread> <start_ns> <end_ns> <name (may hold spaces)>
  memory <thread> <time_ns> <device: cpu | cuda> <bytes (negative: freed)>
  table <sort_by> <row_limit>   followed by the table's lines, each as `row <line, verbatim>`

tests/fixtures/profile/key_averages_cuda_golden.txt: the same scopes and allocations with device
work: kernels launched on the threads, each given (as torch's profiler gives a kernel to the op
whose cudaLaunchKernel it correlates with) to the innermost scope open on its thread at its launch,
and listed as CUDA events of their own, as Kineto's results hold them. Its tables have torch's
Self CUDA / CUDA total columns.

  kernel <thread> <launch_ns> <stream> <start_ns> <end_ns> <name>

Usage: /usr/bin/python3 tools/gen_profiler_golden.py [--out-dir tests/fixtures/profile]
Needs torch (Debian's python3-torch 1.13 was used).
"""

import argparse
import json
import os
import tempfile
import warnings

import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import EventList, FunctionEvent
from torch.profiler import ProfilerActivity, profile, schedule

DEFAULT_OUT_DIR = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "profile")

# (wait, warmup, active, repeat, skip_first, steps)
SCHEDULES = [
    (1, 1, 3, 1, 0, 10),  # headroom train's defaults
    (0, 0, 1, 0, 0, 5),
    (0, 0, 3, 1, 0, 6),
    (2, 1, 2, 2, 1, 16),
    (1, 0, 2, 0, 3, 14),
    (0, 2, 1, 3, 0, 12),
    (3, 1, 1, 1, 2, 12),
    (1, 1, 1, 0, 0, 9),
    (1, 1, 2, 1, 0, 3),   # the run ends inside the active steps
    (4, 1, 1, 1, 0, 3),   # ... or before them
]


class FixedStepProfile(profile):
    """torch.profiler.profile with torch 2's step(): the new scope is named after the new step."""

    def step(self):
        if self.record_steps and self.step_rec_fn:
            self.step_rec_fn.__exit__(None, None, None)
        prev_action = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        self._transit_action(prev_action, self.current_action)
        torch.autograd.profiler.kineto_step()
        if self.record_steps:
            self.step_rec_fn = torch.autograd.profiler.record_function(
                "ProfilerStep#" + str(self.step_num))
            self.step_rec_fn.__enter__()


def recorded_steps(wait, warmup, active, repeat, skip_first, steps):
    recorded = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")

        def ready(prof):
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
            events = trace["traceEvents"] if isinstance(trace, dict) else trace
            for event in events:
                name = event.get("name", "")
                if name.startswith("ProfilerStep#"):
                    recorded.append(int(name[len("ProfilerStep#"):]))

        sched = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                         skip_first=skip_first)
        with FixedStepProfile(activities=[ProfilerActivity.CPU], schedule=sched,
                              on_trace_ready=ready) as prof:
            for _ in range(steps):
                torch.ones(2).add_(1)
                prof.step()
    return sorted(recorded)


def schedule_lines():
    lines = ["# torch.profiler.schedule actions and recorded ProfilerStep#N, torch %s "
             "(see tools/gen_profiler_golden.py)." % torch.__version__,
             "# Written by tools/gen_profiler_golden.py; do not edit."]
    for wait, warmup, active, repeat, skip_first, steps in SCHEDULES:
        fn = schedule(wait=wait, warmup=warmup, active=active, repeat=repeat,
                      skip_first=skip_first)
        lines.append(f"schedule {wait} {warmup} {active} {repeat} {skip_first} {steps}")
        lines.append("actions " + " ".join(fn(step).name for step in range(steps + 1)))
        recorded = recorded_steps(wait, warmup, active, repeat, skip_first, steps)
        lines.append("recorded" + "".join(f" {n}" for n in recorded))
    return lines


# Thread 1 is a training step; thread 2 a loader thread with one scope of its own. Times in ns,
# some with fractions of a microsecond; no two scopes of a thread start together.
FUNCTIONS = [
    (1, 0, 10_000_000, "ProfilerStep#0"),
    (1, 100_000, 4_100_000, "forward"),
    (1, 200_000, 1_200_500, "linear"),
    (1, 300_250, 1_100_000, "matmul"),
    (1, 1_300_000, 1_800_000, "layer_norm"),
    (1, 2_000_000, 3_500_000, "linear"),
    (1, 4_200_000, 9_000_000, "backward"),
    (1, 4_300_000, 6_300_000, "autograd::engine::evaluate_function: LinearBackward0"),
    (1, 4_350_000, 6_250_000, "LinearBackward0"),
    (1, 6_400_000, 7_100_000, "autograd::engine::evaluate_function: LayerNormBackward0"),
    (1, 6_450_000, 7_000_000, "LayerNormBackward0"),
    (1, 9_100_000, 9_900_000, "optimizer.step"),
    (2, 500_000, 812_345, "embedding"),
    (2, 900_000, 1_000_000, "embedding"),
]

MEMORY = [
    (1, 400_000, "cpu", 4096),          # in matmul
    (1, 1_150_000, "cpu", 512),         # in linear, after matmul
    (1, 1_400_000, "cpu", 2048),        # in layer_norm
    (1, 1_700_000, "cpu", -1024),
    (1, 2_100_000, "cpu", 3 << 20),     # 3 Mb in the second linear
    (1, 4_400_000, "cpu", 8192),        # in LinearBackward0
    (1, 6_200_000, "cpu", -4096),
    (1, 6_280_000, "cpu", -512),        # in evaluate_function, after the node
    (1, 9_200_000, "cpu", 5 << 30),     # 5 Gb of optimizer state
    (1, 9_300_000, "cuda", 3 << 29),    # 1.5 Gb on a GPU
    (1, 9_950_000, "cpu", 100),         # in ProfilerStep#0 only
    (2, 600_000, "cpu", 256),
    (2, 950_000, "cpu", -256),
]

TABLES = [
    ("cpu_time_total", 100),
    ("cpu_time_total", 5),
    ("self_cpu_time_total", -1),
    ("self_cpu_memory_usage", 8),
    ("count", 3),
]

# (launching thread, launch ns, stream, device start ns, device end ns, name): the GPU runs behind
# the host, two streams, one launch outside every scope (thread 3); no start equals another.
KERNELS = [
    (3, 50_000, 13, 60_000, 80_000, "tensor.copy"),
    (1, 400_500, 7, 450_000, 1_450_000, "gemm.gemm"),                 # in matmul
    (2, 600_000, 13, 610_000, 640_000, "embedding.forward"),
    (2, 950_000, 13, 955_000, 975_500, "embedding.forward"),
    (1, 1_150_000, 7, 1_460_000, 1_530_250, "elementwise.bias_add"),  # in linear, after matmul
    (1, 1_350_000, 7, 1_540_000, 1_600_500, "norm.layer_norm_forward"),
    (1, 2_100_000, 7, 2_150_000, 4_150_000, "gemm.gemm"),             # the second linear
    (1, 2_200_000, 7, 4_160_000, 4_230_000, "elementwise.bias_add"),
    (1, 4_400_500, 7, 4_420_000, 7_420_000, "gemm.gemm"),             # in LinearBackward0
    (1, 4_500_000, 7, 7_430_000, 7_500_001, "reduction.sum_rows"),
    (1, 6_270_000, 7, 7_510_000, 7_560_000, "tensor.accumulate"),     # evaluate_function only
    (1, 6_500_000, 7, 7_570_000, 7_700_000, "norm.layer_norm_backward"),
    (1, 7_200_000, 13, 7_205_000, 7_305_000, "tensor.copy"),          # backward only
    (1, 9_150_000, 7, 9_160_000, 9_800_000, "adamw.step"),            # in optimizer.step
    (1, 9_950_000, 7, 9_960_000, 9_961_500, "tensor.fill"),           # ProfilerStep#0 only
]

CUDA_TABLES = [
    ("self_cuda_time_total", 100),
    ("cuda_time_total", 6),
    ("cpu_time_total", -1),
    ("cuda_time", 10),
    ("count", 5),
]


def function_events():
    events = []
    for i, (thread, start, end, name) in enumerate(FUNCTIONS):
        inside = [(device, nbytes) for t, time, device, nbytes in MEMORY
                  if t == thread and start <= time <= end]
        events.append(FunctionEvent(
            id=i, name=name, thread=thread, start_us=start / 1000.0, end_us=end / 1000.0,
            cpu_memory_usage=sum(b for d, b in inside if d == "cpu"),
            cuda_memory_usage=sum(b for d, b in inside if d == "cuda"), stack=[]))
    return events


def kernel_events(cpu_events):
    """The KERNELS as CUDA FunctionEvents, each also appended to the innermost CPU event of its
    thread that is open at its launch (the latest to start among those containing it)."""
    events = []
    for i, (thread, launch, stream, start, end, name) in enumerate(KERNELS):
        owners = [e for e in cpu_events
                  if e.thread == thread and e.time_range.start <= launch / 1000.0 <= e.time_range.end]
        if owners:
            owner = max(owners, key=lambda e: e.time_range.start)
            owner.append_kernel(name, 0, (end - start) / 1000.0)
        events.append(FunctionEvent(
            id=len(FUNCTIONS) + i, name=name, thread=stream, start_us=start / 1000.0,
            end_us=end / 1000.0, stack=[], device_type=DeviceType.CUDA, device_index=0))
    return events


def key_averages_lines(kernels, tables):
    lines = ["# torch %s key_averages().table() of the events below "
             "(see tools/gen_profiler_golden.py)." % torch.__version__,
             "# Written by tools/gen_profiler_golden.py; do not edit."]
    for thread, start, end, name in FUNCTIONS:
        lines.append(f"function {thread} {start} {end} {name}")
    for thread, time, device, nbytes in MEMORY:
        lines.append(f"memory {thread} {time} {device} {nbytes}")
    cpu_events = function_events()
    all_events = list(cpu_events)
    if kernels:
        for thread, launch, stream, start, end, name in KERNELS:
            lines.append(f"kernel {thread} {launch} {stream} {start} {end} {name}")
        all_events += kernel_events(cpu_events)
    # As torch's profiler hands them over (_parse_kineto_results): by start, enclosing first.
    ordered = sorted(all_events, key=lambda e: (e.time_range.start, -e.time_range.end))
    events = EventList(ordered, profile_memory=True)
    events._build_tree()
    for sort_by, row_limit in tables:
        table = events.key_averages().table(sort_by=sort_by, row_limit=row_limit)
        lines.append(f"table {sort_by} {row_limit}")
        lines.extend("row " + line for line in table.rstrip("\n").split("\n"))
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=DEFAULT_OUT_DIR)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # schedule() warns about warmup 0
    os.makedirs(args.out_dir, exist_ok=True)
    for name, lines in [("schedule_golden.txt", schedule_lines()),
                        ("key_averages_golden.txt", key_averages_lines(False, TABLES)),
                        ("key_averages_cuda_golden.txt", key_averages_lines(True, CUDA_TABLES))]:
        path = os.path.join(args.out_dir, name)
        with open(path, "w") as out:
            out.write("\n".join(lines) + "\n")
        print("wrote", path)


if __name__ == "__main__":
    main()

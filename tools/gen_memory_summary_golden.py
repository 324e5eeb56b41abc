#!/usr/bin/env python3
"""Writes tests/fixtures/memory_summary_<case>.{stats,txt}: stats maps, and the table PyTorch's own
torch.cuda.memory_summary() prints for them, with headroom's three wording changes applied.

PyTorch's function is not copied into this repository. It is loaded at run time from
  --memory-py PATH   torch/cuda/memory.py of a PyTorch checkout (any file defining memory_summary)
  (default)          the installed torch package
and run with memory_stats() and _get_device_index() replaced by stubs returning a case's stats.
It must be a version that prints the "Requested memory" row and KiB/MiB units (Debian's
python3-torch 1.13 does not: it prints KB/MB and has no requested_bytes row).

The committed fixtures were made from torch/cuda/memory.py of pytorch/pytorch commit
00b65a04a2d30e498eedcb1e3476abd547f428f1 (PyTorch is BSD-3-Clause licensed):
  python3 tools/gen_memory_summary_golden.py --memory-py /path/to/pytorch/torch/cuda/memory.py

Wording changes (each keeps every line 75 characters wide inside the | frame and every value in
the column PyTorch prints it in):
  "PyTorch CUDA memory summary, device ID {id:<17}" -> "headroom memory summary, device {name:<24}"
  "CUDA OOMs: "                                     -> "     OOMs: "
  "  cudaMalloc retries: "                          -> "device alloc retries: "
"""

import argparse
import ast
import inspect
import os
import sys
import typing

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")

POOL_METRICS = [
    "allocated_bytes", "active_bytes", "requested_bytes", "reserved_bytes", "inactive_split_bytes",
    "allocation", "active", "segment", "inactive_split",
]
POOLS = ["all", "large_pool", "small_pool"]
STATS = ["current", "peak", "allocated", "freed"]
OVERSIZE_METRICS = ["oversize_allocations", "oversize_segments"]

KiB, MiB, GiB, TiB, PiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40, 1 << 50


def zero_stats():
    stats = {}
    for metric in POOL_METRICS:
        for pool in POOLS:
            for stat in STATS:
                stats[f"{metric}.{pool}.{stat}"] = 0
    for metric in OVERSIZE_METRICS:
        for stat in STATS:
            stats[f"{metric}.{stat}"] = 0
    # Keys memory_stats() also returns that the summary does not print.
    for key in ["num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
                "num_device_free", "max_split_size"]:
        stats[key] = 0
    return stats


def set_metric(stats, metric, rows):
    """rows: {pool: (current, peak, allocated, freed)}."""
    for pool, values in rows.items():
        for stat, value in zip(STATS, values):
            stats[f"{metric}.{pool}.{stat}"] = value


def set_oversize(stats, metric, values):
    for stat, value in zip(STATS, values):
        stats[f"{metric}.{stat}"] = value


def units_stats():
    """A training-run-like map whose columns switch between every size and count unit. Sub-rows
    are printed in the unit of their `all` row: small-pool values show as 0 GiB, and so on."""
    s = zero_stats()
    set_metric(s, "allocated_bytes", {
        "all": (1000, 800 * KiB + 5, 5 * GiB + 300 * MiB, 3 * TiB + 7),
        "large_pool": (0, 790 * KiB, 5 * GiB, 3 * TiB),
        "small_pool": (1000, 10 * KiB + 5, 300 * MiB, 7),
    })
    set_metric(s, "active_bytes", {
        "all": (37 * GiB + 123, 71 * GiB + 5 * MiB, 900 * TiB, 899 * TiB + 1),
        "large_pool": (36 * GiB + 900 * MiB, 70 * GiB, 880 * TiB, 879 * TiB),
        "small_pool": (100 * MiB + 123, 1 * GiB + 5 * MiB, 20 * TiB, 20 * TiB + 1),
    })
    set_metric(s, "requested_bytes", {
        "all": (37 * GiB - 1, 70 * GiB + 999, 899 * TiB, 898 * TiB),
        "large_pool": (36 * GiB, 69 * GiB, 879 * TiB, 878 * TiB),
        "small_pool": (1 * GiB - 1, 1 * GiB + 999, 20 * TiB, 20 * TiB),
    })
    set_metric(s, "reserved_bytes", {
        "all": (40 * GiB, 78 * GiB, 2 * PiB, 2 * PiB - 40 * GiB),
        "large_pool": (39 * GiB, 76 * GiB, 1 * PiB, 1 * PiB - 39 * GiB),
        "small_pool": (1 * GiB, 2 * GiB, 1 * PiB, 1 * PiB - 1 * GiB),
    })
    set_metric(s, "inactive_split_bytes", {
        "all": (3 * GiB - 123, 9 * GiB, 500 * TiB, 500 * TiB - 3 * GiB),
        "large_pool": (3 * GiB - 200 * MiB, 8 * GiB, 450 * TiB, 450 * TiB - 3 * GiB),
        "small_pool": (200 * MiB - 123, 1 * GiB, 50 * TiB, 50 * TiB),
    })
    set_metric(s, "allocation", {
        "all": (1234, 5678, 912_345_678, 912_344_444),
        "large_pool": (234, 678, 12_345_678, 12_345_444),
        "small_pool": (1000, 5000, 900_000_000, 899_999_000),
    })
    set_metric(s, "active", {
        "all": (1300, 760_000, 3_000_000_000, 2_999_998_700),
        "large_pool": (300, 10_000, 1_000_000_000, 999_999_700),
        "small_pool": (1000, 750_000, 2_000_000_000, 1_999_999_000),
    })
    set_metric(s, "segment", {
        "all": (420, 512, 9_876, 9_456),
        "large_pool": (400, 480, 9_000, 8_600),
        "small_pool": (20, 32, 876, 856),
    })
    set_metric(s, "inactive_split", {
        "all": (77, 1_500, 749_999, 749_922),
        "large_pool": (70, 1_400, 700_000, 699_930),
        "small_pool": (7, 100, 49_999, 49_992),
    })
    set_oversize(s, "oversize_allocations", (3, 17, 1_750_000, 1_749_997))
    set_oversize(s, "oversize_segments", (2, 9, 760_000_000, 759_999_998))
    s["num_ooms"] = 3
    s["num_alloc_retries"] = 1_234_567
    s["num_device_alloc"] = 9_876
    s["max_split_size"] = -1
    return s


def edges_stats():
    """Values on each side of every switch point, negatives (Python's // floors) and values too
    wide for their column, which PyTorch prints in full, widening the line."""
    s = zero_stats()
    set_metric(s, "allocated_bytes", {
        "all": (768 * KiB - 1, 768 * KiB, 768 * MiB - 1, 768 * MiB),
        "large_pool": (768 * KiB - 1, 768 * KiB - 1, 768 * MiB - 1, 768 * MiB - 1),
        "small_pool": (0, 1023, 1025, -1),
    })
    set_metric(s, "active_bytes", {
        "all": (768 * GiB - 1, 768 * GiB, 768 * TiB - 1, 768 * TiB),
        "large_pool": (1, 1024, 1024 * 1024 - 1, 768 * PiB),
        "small_pool": (-1500, -1, -(1 << 63), (1 << 63) - 1),
    })
    set_metric(s, "requested_bytes", {
        "all": (8000 * PiB, 768 * PiB, 768 * PiB - 1, -5),
        "large_pool": (1, 2, 3, 4),
        "small_pool": (-1, -2, -3, -4),
    })
    set_metric(s, "allocation", {
        "all": (749_999, 750_000, 749_999_999, 750_000_000),
        "large_pool": (749_999, 749_999, 1_999, -1),
        "small_pool": (0, 999, 1_000_001, 750_000_000_000),
    })
    set_metric(s, "active", {
        "all": (-1, 9_000_000_000_000, 750_000_000_000_000, 0),
        "large_pool": (-1001, 1, 999_999, 1),
        "small_pool": (1, 1, 1, 1),
    })
    set_oversize(s, "oversize_allocations", (749_999, 750_000, 749_999_999, 750_000_000))
    set_oversize(s, "oversize_segments", (-1, -750_000, 0, 1))
    s["num_ooms"] = 999_999_999_999
    s["num_alloc_retries"] = 99_999_999
    return s


CASES = [
    # name, device name, abbreviated, stats, every line 75 characters wide
    ("zero", "NVIDIA H100 80GB HBM3", False, zero_stats(), True),
    ("units", "cuda:0", False, units_stats(), True),
    ("abbreviated", "NVIDIA H200", True, units_stats(), True),
    ("edges", "x" * 24, False, edges_stats(), False),
]


def load_memory_summary(memory_py):
    if memory_py:
        with open(memory_py, encoding="utf-8") as f:
            source = f.read()
        tree = ast.parse(source)
        defs = [n for n in tree.body
                if isinstance(n, ast.FunctionDef) and n.name == "memory_summary"]
        if not defs:
            sys.exit(f"{memory_py} defines no top-level memory_summary")
        function_source = ast.get_source_segment(source, defs[0])
        origin = memory_py
    else:
        try:
            import torch.cuda.memory
        except ImportError:
            sys.exit("torch is not installed; pass --memory-py PATH/torch/cuda/memory.py")
        function_source = inspect.getsource(torch.cuda.memory.memory_summary)
        origin = f"torch {torch.__version__}"
    for needed in ('"requested_bytes"', '"KiB"'):
        if needed not in function_source:
            sys.exit(f"memory_summary from {origin} has no {needed}: it is older than the layout "
                     "headroom reproduces")
    return function_source, origin


def run_memory_summary(function_source, stats, abbreviated):
    namespace = {
        "_get_device_index": lambda device, optional=False: device,
        "memory_stats": lambda device=None: dict(sorted(stats.items())),
        "Device": object,
        "Union": typing.Union,
        "Optional": typing.Optional,
    }
    exec(compile(function_source, "<memory_summary>", "exec"), namespace)
    return namespace["memory_summary"](device=0, abbreviated=abbreviated)


def replace_once(text, old, new):
    if len(old) != len(new):
        raise AssertionError(f"replacement changes the width: {old!r} -> {new!r}")
    if text.count(old) != 1:
        raise AssertionError(f"expected {old!r} once in PyTorch's output, found {text.count(old)}")
    return text.replace(old, new)


def headroom_wording(text, device_name, fixed_width):
    if len(device_name) > 24:
        raise AssertionError("a device name over 24 characters does not fit PyTorch's title width")
    text = replace_once(text, "PyTorch CUDA memory summary, device ID " + f"{0:<17d}",
                        "headroom memory summary, device " + f"{device_name:<24}")
    text = replace_once(text, "CUDA OOMs: ", "     OOMs: ")
    text = replace_once(text, "  cudaMalloc retries: ", "device alloc retries: ")
    for line in text.splitlines():
        if line[0] != "|" or line[-1] != "|" or (fixed_width and len(line) != 77):
            raise AssertionError(f"line is not 75 characters inside the frame: {line!r}")
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memory-py",
                        help="PyTorch's torch/cuda/memory.py to take memory_summary from")
    parser.add_argument("--out", default=FIXTURES,
                        help="fixture directory (default: tests/fixtures)")
    args = parser.parse_args()

    function_source, origin = load_memory_summary(args.memory_py)
    os.makedirs(args.out, exist_ok=True)
    for name, device_name, abbreviated, stats, fixed_width in CASES:
        text = run_memory_summary(function_source, stats, abbreviated)
        text = headroom_wording(text, device_name, fixed_width)
        stem = os.path.join(args.out, f"memory_summary_{name}")
        with open(stem + ".stats", "w", encoding="utf-8", newline="\n") as f:
            f.write(f"# Input of memory_summary_{name}.txt; written by "
                    "tools/gen_memory_summary_golden.py\n")
            f.write(f"device_name={device_name}\n")
            f.write(f"abbreviated={int(abbreviated)}\n")
            for key, value in sorted(stats.items()):
                f.write(f"{key}={value}\n")
        with open(stem + ".txt", "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        print(f"wrote {stem}.stats and .txt from {origin}")


if __name__ == "__main__":
    main()

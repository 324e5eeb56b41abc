#!/usr/bin/python3
"""The PyTorch side of bench/gemm_bench: torch's bf16 matmul (oneDNN through ideep in torch 1.13)
on the shapes gemm_bench passes, timed as gemm_bench times its own (one warm-up, best of twenty).
Prints one line per shape, "RESULT <index> <GFLOP/s>", for gemm_bench to read.

Usage: /usr/bin/python3 bench/gemm_bench_peer.py --threads N M,N,K,TA,TB [M,N,K,TA,TB ...]
"""

import argparse
import sys
import time


def best_of(runs, f):
    f()
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("shapes", nargs="+")
    args = parser.parse_args()
    try:
        import torch
    except ImportError as e:
        print("peer: torch is not importable (%s)" % e)
        sys.exit(3)
    torch.set_num_threads(args.threads)
    for index, shape in enumerate(args.shapes):
        m, n, k, ta, tb = (int(x) for x in shape.split(","))
        # Stored as gemm_bench stores them: op(A) = A^T when TA, so A is K x M.
        a = torch.full((k, m) if ta else (m, k), 0.5, dtype=torch.bfloat16)
        b = torch.full((n, k) if tb else (k, n), 0.25, dtype=torch.bfloat16)
        a, b = (a.t() if ta else a), (b.t() if tb else b)
        seconds = best_of(20, lambda: torch.matmul(a, b))
        print("RESULT %d %.1f" % (index, 2.0 * m * n * k / seconds / 1e9), flush=True)


if __name__ == "__main__":
    main()

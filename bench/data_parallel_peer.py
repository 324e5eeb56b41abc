"""The PyTorch peer of bench/data_parallel.cpp: the gpt2 124M model (transformers'
GPT2LMHeadModel, HF's dropout 0.1), fp32 AdamW, the same global batch of --global-batch x
--context tokens a step, as 1 process with 2 threads, and as 2 processes with 1 thread each over
gloo with DDP (torch's DistributedDataParallel) and FSDP2 (fully_shard per block, then the root,
ZeRO-3's peer). Prints one RESULT line per run: mode, tokens_per_s (median over the steps after
the first 2) and step_ms. Needs torch and transformers (PyPI)."""

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def build_model():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(7)
    return GPT2LMHeadModel(GPT2Config())


def train(model, batch, context, steps, rank_seed):
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.0)
    generator = torch.Generator().manual_seed(rank_seed)
    times = []
    for _ in range(steps):
        ids = torch.randint(0, 256, (batch, context + 1), generator=generator)
        start = time.perf_counter()
        out = model(input_ids=ids[:, :-1], labels=ids[:, :-1])
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
    return times


def report(mode, times, tokens_per_step):
    timed = times[2:]
    step = statistics.median(timed)
    print(f"RESULT mode={mode} tokens_per_s={tokens_per_step / step:.1f} "
          f"step_ms={1000.0 * step:.1f}", flush=True)


def rank_main(rank, mode, args, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = build_model()
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        for block in model.transformer.h:
            fully_shard(block)
        fully_shard(model)
    times = train(model, args.global_batch // 2, args.context, args.steps, 100 + rank)
    if rank == 0:
        report(mode, times, args.global_batch * args.context)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--modes", default="single,ddp,fsdp")
    args = parser.parse_args()
    print(f"peer: torch {torch.__version__}", flush=True)
    for i, mode in enumerate(args.modes.split(",")):
        if mode == "single":
            torch.set_num_threads(2)
            times = train(build_model(), args.global_batch, args.context, args.steps, 100)
            report(mode, times, args.global_batch * args.context)
            continue
        try:
            mp.spawn(rank_main, args=(mode, args, 29500 + os.getpid() % 1000 + i), nprocs=2)
        except Exception as e:  # a mode this torch cannot run on the CPU: said, not fatal
            print(f"peer: {mode} failed: {str(e).splitlines()[-1] if str(e) else e}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

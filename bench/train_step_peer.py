#!/usr/bin/python3
"""The PyTorch side of bench/train_step: the same GPT-2 (HF GPT2LMHeadModel's computation and
init, dropout 0) in plain PyTorch 1.13, trained with torch.optim.AdamW on the same token ids, timed
the same way. train_step runs it and reads the last line, "RESULT key=value ...".

torch 1.13 has no scaled_dot_product_attention: attention is q @ k^T, a causal mask, softmax, @ v,
as HF's eager GPT-2 attention. Peak memory is the growth of the resident set (getrusage maxrss
over /proc/self/statm before the first step), since PyTorch's CPU allocator keeps no statistics.

Usage: /usr/bin/python3 bench/train_step_peer.py [--layers 6 --d-model 384 ...] (see --help)
"""

import argparse
import math
import os
import resource
import statistics
import sys
import time

MASK64 = (1 << 64) - 1


def checkpointing_policy(value):
    """--checkpointing's value as the number N of every_N (full is every_1), or 0 for none."""
    if value == "none":
        return 0
    if value == "full":
        return 1
    every = value[len("every_"):] if value.startswith("every_") else ""
    if every.isdigit() and int(every) >= 1:
        return int(every)
    raise argparse.ArgumentTypeError("'%s' is not one of none, full or every_N (N >= 1)" % value)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [("layers", 6), ("d-model", 384), ("heads", 6), ("context", 256),
                          ("batch", 8), ("vocab", 50304), ("steps", 10), ("warmup", 2),
                          ("threads", os.cpu_count()), ("seed", 1234)]:
        parser.add_argument("--" + name, type=int, default=default)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    # torch 1.13's foreach=True is the slower one on the CPU: its _foreach_* ops loop over the
    # tensors anyway and allocate a temporary per intermediate (measured on 30M GPT-2 parameters,
    # 2 threads: 2.8-3.0 s per step against 0.35-0.65 s for the single-tensor path).
    parser.add_argument("--foreach", type=int, default=0, choices=[0, 1])
    # fp32; bf16: torch.autocast("cpu", bfloat16) over the forward and loss, fp32 weights;
    # fp16: the same with float16 and a GradScaler, where torch supports it on the CPU (not
    # 1.13); pure_bf16: model.to(bfloat16), torch.optim.AdamW on bf16 weights and states.
    parser.add_argument("--precision", default="fp32",
                        choices=["fp32", "bf16", "fp16", "pure_bf16"])
    # none; full: every block under torch.utils.checkpoint(use_reentrant=False), as HF's
    # gradient_checkpointing_enable does; every_N: the blocks whose index is a multiple of N, as
    # headroom's every_N (bench/memory_tradeoff's checkpointing rows).
    parser.add_argument("--checkpointing", default="none", type=checkpointing_policy,
                        help="none, full or every_N (N >= 1)")
    # The batches as int64 ids, [steps][batch][context + 1], instead of the splitmix64 ones; and
    # clip_grad_norm_ before each step when > 0 (bench/memory_tradeoff).
    parser.add_argument("--batches", default="")
    parser.add_argument("--max-grad-norm", type=float, default=0.0)
    return parser.parse_args()


def batch_tokens(args, step):
    """train_step.cpp's batch_tokens: splitmix64 of (seed, step, index) modulo the vocabulary."""
    n = args.batch * (args.context + 1)
    base = (args.seed * (1 << 32) + step * (1 << 24)) & MASK64
    tokens = []
    for i in range(n):
        z = (base + i + 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        tokens.append(z % args.vocab)
    return tokens


def init_gpt2_weights(model, layers):
    """HF GPT-2's _init_weights (initializer_range 0.02), residual projections scaled by
    1 / sqrt(2 * layers); shared with tools/peer_gpt2_cuda.py."""
    from torch import nn

    for name, p in model.named_parameters():
        if p.dim() >= 2:
            std = 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj.weight") else 0.02
            nn.init.normal_(p, 0.0, std)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
        else:
            nn.init.ones_(p)


def rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def blas_libraries():
    """The BLAS shared objects mapped into this process (to show which one torch really uses)."""
    found = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "blas" in os.path.basename(path).lower():
                found.add(os.path.realpath(path))
    return sorted(found)


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
        import torch.utils.checkpoint
        from torch import nn
    except ImportError as e:
        print("peer: torch is not importable (%s)" % e)
        sys.exit(3)
    torch.set_num_threads(args.threads)

    def matmul_gflops():
        a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
        a @ b
        reps = 10
        start = time.perf_counter()
        for _ in range(reps):
            a @ b
        return 2.0 * 1024 ** 3 * reps / (time.perf_counter() - start) / 1e9

    class Block(nn.Module):
        def __init__(self, d, heads, context):
            super().__init__()
            self.heads = heads
            self.ln_1 = nn.LayerNorm(d, eps=1e-5)
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
            self.ln_2 = nn.LayerNorm(d, eps=1e-5)
            self.c_fc = nn.Linear(d, 4 * d)
            self.mlp_c_proj = nn.Linear(4 * d, d)
            self.register_buffer(
                "masked", ~torch.tril(torch.ones(context, context, dtype=torch.bool)),
                persistent=False)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
            att = F.softmax(att.masked_fill(self.masked[:t, :t], float("-inf")), dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
            x = x + self.c_proj(y)
            return x + self.mlp_c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            d = args.d_model
            self.wte = nn.Embedding(args.vocab, d)
            self.wpe = nn.Embedding(args.context, d)
            self.h = nn.ModuleList(Block(d, args.heads, args.context) for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(d, eps=1e-5)
            init_gpt2_weights(self, args.layers)

        def loss(self, input_ids, targets):
            t = input_ids.shape[1]
            x = self.wte(input_ids) + self.wpe(torch.arange(t))
            for index, block in enumerate(self.h):
                if args.checkpointing and index % args.checkpointing == 0:
                    x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
                else:
                    x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied LM head
            return F.cross_entropy(logits.view(-1, args.vocab), targets.reshape(-1))

    gflops = matmul_gflops()
    torch.manual_seed(args.seed)
    model = GPT2()
    model.train()
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    if autocast_dtype is not None:
        try:
            with torch.autocast("cpu", dtype=autocast_dtype):
                pass
        except (RuntimeError, AssertionError) as e:
            print("torch %s: %s autocast on the CPU is not supported (%s)" %
                  (torch.__version__, args.precision, str(e).splitlines()[0]))
            print("RESULT torch=%s unsupported=1" % torch.__version__)
            return
    if args.precision == "pure_bf16":
        model.to(torch.bfloat16)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": args.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr, foreach=bool(args.foreach))
    params = sum(p.numel() for p in model.parameters())
    print("torch %s: %.2fM parameters; %d threads; BLAS %s; 1024^3 matmul %.1f GFLOP/s; "
          "AdamW foreach=%s" % (torch.__version__, params / 1e6, torch.get_num_threads(),
                                ", ".join(blas_libraries()) or "(none mapped)", gflops,
                                bool(args.foreach)))

    batches = []
    if args.batches:
        with open(args.batches, "rb") as f:
            ids = torch.frombuffer(bytearray(f.read()), dtype=torch.int64)
        ids = ids.view(-1, args.batch, args.context + 1)
    for step in range(args.warmup + args.steps):
        if args.batches:
            tokens = ids[step].clone()
        else:
            tokens = torch.tensor(batch_tokens(args, step), dtype=torch.long).view(
                args.batch, args.context + 1)
        batches.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))

    rss_before = rss_bytes()
    times = {"step": [], "forward": [], "backward": [], "optimizer": []}
    losses = []
    for step, (input_ids, targets) in enumerate(batches):
        t0 = time.perf_counter()
        if autocast_dtype is not None:
            with torch.autocast("cpu", dtype=autocast_dtype):
                loss = model.loss(input_ids, targets)
        else:
            loss = model.loss(input_ids, targets)
        t1 = time.perf_counter()
        loss.backward()
        if args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        t2 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        losses.append(loss.item())
        timed = step >= args.warmup
        print("torch:    step %2d%s loss %.4f  %8.1f ms (forward %.1f, backward %.1f, "
              "optimizer %.1f) %s" % (step, "        " if timed else " warm-up", losses[-1],
                                   (t3 - t0) * 1e3, (t1 - t0) * 1e3, (t2 - t1) * 1e3,
                                   (t3 - t2) * 1e3, args.precision), flush=True)
        if timed:
            for key, seconds in (("step", t3 - t0), ("forward", t1 - t0),
                                 ("backward", t2 - t1), ("optimizer", t3 - t2)):
                times[key].append(seconds)

    median_ms = {key: statistics.median(v) * 1e3 for key, v in times.items()}
    tokens_per_s = args.batch * args.context / (median_ms["step"] / 1e3)
    growth = max(0, peak_rss_bytes() - rss_before)
    print("torch:    %.0f tokens/s (median step %.1f ms); peak RSS growth %.1f MiB" %
          (tokens_per_s, median_ms["step"], growth / 2 ** 20))
    print("RESULT torch=%s tokens_per_s=%.3f step_ms=%.3f forward_ms=%.3f backward_ms=%.3f "
          "optimizer_ms=%.3f peak_rss_growth_bytes=%d matmul_gflops=%.3f first_loss=%.6f "
          "last_loss=%.6f" % (torch.__version__, tokens_per_s, median_ms["step"],
                              median_ms["forward"], median_ms["backward"],
                              median_ms["optimizer"], growth, gflops, losses[0], losses[-1]))


if __name__ == "__main__":
    main()

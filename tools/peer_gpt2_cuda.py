#!/usr/bin/env python3
"""The PyTorch side of bench/gpu_train_step: GPT-2 (HF GPT2LMHeadModel's computation and init,
dropout 0, the LM head tied to the token embedding) in plain PyTorch on cuda:0, trained with
torch.autocast("cuda", bfloat16) over fp32 weights and torch.optim.AdamW(fused=True) on the same
token ids as headroom, once eager and once under torch.compile.

Attention is F.scaled_dot_product_attention(is_causal=True). Each mode builds a fresh model from
the seed, runs --warmup steps (torch.compile compiles in them), then --steps timed steps between
two torch.cuda.synchronize() calls; every step reads its loss (loss.item(), one sync, as
headroom's Trainer step does). Peak memory is torch.cuda.max_memory_allocated() over the mode,
reset after the previous mode's tensors are freed.

Progress goes to stderr; with --json the last line of stdout is one JSON object:
{"torch": version, "gpu": name, "runs": [{"mode", "tokens_per_s", "step_ms",
"peak_allocated_bytes", "first_loss", "last_loss", "parameters"}, ...]}.

Usage: python3 tools/peer_gpt2_cuda.py --json [--layers 12 --d-model 768 ...] (see --help)
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time

# The token ids both sides train on (bench_support.h's batch_tokens, in Python).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from train_step_peer import batch_tokens, init_gpt2_weights  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [("layers", 12), ("d-model", 768), ("heads", 12), ("context", 1024),
                          ("batch", 16), ("vocab", 50304), ("steps", 20), ("warmup", 10),
                          ("seed", 1234)]:
        parser.add_argument("--" + name, type=int, default=default)
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--modes", default="eager,compile",
                        help="comma-separated: eager, compile")
    parser.add_argument("--json", action="store_true", help="end with one JSON line on stdout")
    return parser.parse_args()


def log(message):
    print(message, file=sys.stderr, flush=True)


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
        from torch import nn
    except ImportError as e:
        log("peer: torch is not importable (%s)" % e)
        sys.exit(3)
    if not torch.cuda.is_available():
        log("peer: torch %s sees no CUDA device" % torch.__version__)
        sys.exit(3)
    device = torch.device("cuda", 0)
    # The allocator's statistics exist only once CUDA is initialized: reset_peak_memory_stats on
    # a fresh process raises "Invalid device argument".
    torch.cuda.init()
    torch.empty(1, device=device)

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln_1 = nn.LayerNorm(d, eps=1e-5)
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
            self.ln_2 = nn.LayerNorm(d, eps=1e-5)
            self.c_fc = nn.Linear(d, 4 * d)
            self.mlp_c_proj = nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))
            return x + self.mlp_c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            d = args.d_model
            self.wte = nn.Embedding(args.vocab, d)
            self.wpe = nn.Embedding(args.context, d)
            self.h = nn.ModuleList(Block(d, args.heads) for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(d, eps=1e-5)
            init_gpt2_weights(self, args.layers)

        def forward(self, input_ids, targets):
            t = input_ids.shape[1]
            x = self.wte(input_ids) + self.wpe(torch.arange(t, device=input_ids.device))
            for block in self.h:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # the tied LM head
            return F.cross_entropy(logits.view(-1, args.vocab), targets.reshape(-1))

    batches = []
    for step in range(args.warmup + args.steps):
        tokens = torch.tensor(batch_tokens(args, step), dtype=torch.long).view(
            args.batch, args.context + 1)
        batches.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))

    def run(mode):
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        torch.manual_seed(args.seed)
        model = GPT2().to(device)
        model.train()
        parameters = sum(p.numel() for p in model.parameters())
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": args.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=args.lr, betas=(0.9, 0.999), eps=1e-8, fused=True)
        step_fn = torch.compile(model) if mode == "compile" else model
        losses, timed_ms = [], []
        start = None
        for step, (input_ids, targets) in enumerate(batches):
            if step == args.warmup:
                torch.cuda.synchronize(device)
                start = time.perf_counter()
            t0 = time.perf_counter()
            input_ids = input_ids.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_fn(input_ids, targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            ms = (time.perf_counter() - t0) * 1e3
            timed = step >= args.warmup
            if timed:
                timed_ms.append(ms)
            log("torch %-7s step %3d%s loss %.4f  %8.1f ms" %
                (mode, step, "        " if timed else " warm-up", losses[-1], ms))
        torch.cuda.synchronize(device)
        seconds = time.perf_counter() - start
        result = {"mode": mode,
                  "tokens_per_s": args.steps * args.batch * args.context / seconds,
                  "step_ms": statistics.median(timed_ms),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(device),
                  "first_loss": losses[0], "last_loss": losses[-1],
                  "parameters": parameters}
        log("torch %-7s %.0f tokens/s (median step %.1f ms); peak allocated %.1f MiB" %
            (mode, result["tokens_per_s"], result["step_ms"],
             result["peak_allocated_bytes"] / 2 ** 20))
        del model, optimizer, step_fn
        return result

    runs = [run(mode) for mode in args.modes.split(",") if mode]
    summary = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(device),
               "runs": runs}
    if args.json:
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

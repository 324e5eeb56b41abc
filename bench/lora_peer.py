#!/usr/bin/env python3
"""The PyTorch side of bench/lora: the same Llama-shaped model (transformers' LlamaForCausalLM,
random init) fine-tuned in full, or with PEFT's LoRA (get_peft_model) on the same targets, with
torch.optim.AdamW over the trainable parameters, on the same token ids (bench/bench_support.h's
splitmix64 stream), timed the same way. bench/lora runs it once per mode and reads its last line,
"RESULT key=value ...".

Peak memory is the growth of the resident set (getrusage maxrss over /proc/self/statm before the
first step), since PyTorch's CPU allocator keeps no statistics; one mode per process, so the
peaks do not mix.

Usage: python3 bench/lora_peer.py --mode lora [--layers 4 --hidden 512 ...]
"""

import argparse
import os
import resource
import statistics
import time

from train_step_peer import batch_tokens  # the same splitmix64 token stream


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in [("layers", 4), ("hidden", 512), ("intermediate", 1376), ("heads", 8),
                          ("kv-heads", 0), ("context", 256), ("batch", 4), ("vocab", 32000),
                          ("steps", 5), ("warmup", 2), ("threads", os.cpu_count()),
                          ("seed", 1234), ("r", 16)]:
        parser.add_argument("--" + name, type=int, default=default)
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--targets", default="q_proj,v_proj")
    parser.add_argument("--mode", choices=["full", "lora"], required=True)
    return parser.parse_args()


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main():
    args = parse_args()
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                         intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads or args.heads,
                         max_position_embeddings=args.context, tie_word_embeddings=False)
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    versions = "torch=%s transformers=%s" % (torch.__version__, transformers.__version__)
    if args.mode == "lora":
        import peft
        from peft import LoraConfig, get_peft_model
        targets = args.targets if args.targets == "all-linear" else args.targets.split(",")
        model = get_peft_model(model, LoraConfig(r=args.r, lora_alpha=args.alpha,
                                                 lora_dropout=0.0, target_modules=targets,
                                                 task_type="CAUSAL_LM"))
        versions += " peft=%s" % peft.__version__
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=0.0, foreach=False)
    print("peer %s: %.2fM parameters, %.2fM trainable; %d threads; %s" % (
        args.mode, sum(p.numel() for p in model.parameters()) / 1e6,
        sum(p.numel() for p in trainable) / 1e6, torch.get_num_threads(), versions))
    rss_before = rss_bytes()
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        tokens = torch.tensor(batch_tokens(args, step)).view(args.batch, args.context + 1)
        ids, targets = tokens[:, :-1], tokens[:, 1:]
        t0 = time.perf_counter()
        logits = model(input_ids=ids).logits
        loss = F.cross_entropy(logits.reshape(-1, args.vocab).float(), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - t0
        losses.append(loss.item())
        print("peer %s: step %d loss %.4f %.1f ms" % (args.mode, step, losses[-1], seconds * 1e3))
        if step >= args.warmup:
            times.append(seconds)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("RESULT step_ms=%.3f peak_rss_growth_bytes=%d first_loss=%.6f last_loss=%.6f %s" % (
        statistics.median(times) * 1e3, max(0, peak - rss_before), losses[0], losses[-1],
        versions))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The PyTorch side of bench/gpu_train_step --model: a Llama-family model of the config.json
headroom wrote, trained on the same token ids with torch.autocast("cuda", bfloat16) and
torch.optim.AdamW(fused=True): in full (fp32 weights) or, with --lora R, LoRA r R (alpha R, no
dropout) on every linear layer of the blocks over a frozen bf16 base with fp32 adapters, as PEFT
under autocast.

The model is transformers' AutoModelForCausalLM (SDPA attention) and the adapters PEFT's when the
image has them (--impl auto; hf asks for them), else the same computation in plain PyTorch
(--impl plain: RMSNorm, RoPE with Llama 3's frequency scaling, grouped-query SDPA, SwiGLU, the
LM head tied as the config says). The loss is the cross-entropy of fp32 logits, as transformers'
loss computes it. Timing, peaks and the JSON line are those of tools/peer_gpt2_cuda.py, whose
contract bench/gpu_train_step reads; the JSON also names the implementation ("model").

--device cpu runs the same code on the CPU (a smoke test of this script; autocast to bf16 there).

Usage: python3 tools/peer_llama_cuda.py --config DIR/config.json --json [--lora 16] (see --help)
"""

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

# The token ids both sides train on (bench_support.h's batch_tokens, in Python).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from train_step_peer import batch_tokens  # noqa: E402


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the config.json of the model")
    for name, default in [("context", 2048), ("batch", 4), ("steps", 10), ("warmup", 3),
                          ("seed", 1234), ("lora", 0)]:
        parser.add_argument("--" + name, type=int, default=default)
    parser.add_argument("--lr", type=float, default=6e-4)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--modes", default="eager", help="comma-separated: eager, compile")
    parser.add_argument("--impl", default="auto", choices=["auto", "hf", "plain"])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--json", action="store_true", help="end with one JSON line on stdout")
    return parser.parse_args()


def log(message):
    print(message, file=sys.stderr, flush=True)


def llama3_inv_freq(torch, head_dim, theta, scaling):
    """RoPE's inverse frequencies, with rope_type llama3's smoothing when the config has it
    (transformers' _compute_llama3_parameters)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    if not scaling or scaling.get("rope_type", scaling.get("type")) != "llama3":
        return inv_freq
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = original / low, original / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (original / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


def plain_model(torch, cfg):
    """Llama in plain PyTorch, HF's computation and initialisation (normal(0, range) for
    linears and embeddings, ones for norms)."""
    F = torch.nn.functional
    nn = torch.nn
    d, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or d // heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    bias = cfg.get("attention_bias", False)

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            dtype = x.dtype
            x = x.float()
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            return self.weight * x.to(dtype)

    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.q_proj = nn.Linear(d, heads * head_dim, bias=bias)
            self.k_proj = nn.Linear(d, kv_heads * head_dim, bias=bias)
            self.v_proj = nn.Linear(d, kv_heads * head_dim, bias=bias)
            self.o_proj = nn.Linear(heads * head_dim, d, bias=bias)
            self.post_attention_layernorm = RMSNorm()
            self.gate_proj = nn.Linear(d, cfg["intermediate_size"], bias=False)
            self.up_proj = nn.Linear(d, cfg["intermediate_size"], bias=False)
            self.down_proj = nn.Linear(cfg["intermediate_size"], d, bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            h = self.input_layernorm(x)
            q = self.q_proj(h).view(b, t, heads, head_dim).transpose(1, 2)
            k = self.k_proj(h).view(b, t, kv_heads, head_dim).transpose(1, 2)
            v = self.v_proj(h).view(b, t, kv_heads, head_dim).transpose(1, 2)
            q, k = rotate(q, cos, sin).to(v.dtype), rotate(k, cos, sin).to(v.dtype)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               enable_gqa=kv_heads != heads)
            x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, heads * head_dim))
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg["vocab_size"], d)
            self.layers = nn.ModuleList(Block() for _ in range(cfg["num_hidden_layers"]))
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(d, cfg["vocab_size"], bias=False)
            if cfg.get("tie_word_embeddings", False):
                self.lm_head.weight = self.embed_tokens.weight
            std = cfg.get("initializer_range", 0.02)
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, std)
                    if getattr(m, "bias", None) is not None:
                        nn.init.zeros_(m.bias)
            self.register_buffer("inv_freq", llama3_inv_freq(
                torch, head_dim, cfg.get("rope_theta", 10000.0), cfg.get("rope_scaling")),
                persistent=False)

        def forward(self, input_ids):
            t = input_ids.shape[1]
            freqs = torch.outer(torch.arange(t, device=input_ids.device, dtype=torch.float32),
                                self.inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
            x = self.embed_tokens(input_ids)
            for block in self.layers:
                x = block(x, cos, sin)
            return self.lm_head(self.norm(x))

    return Llama()


def add_plain_lora(torch, model, r):
    """LoRA on every linear layer of the blocks, as PEFT's: A kaiming-uniform (a = sqrt 5), B 0,
    scaling alpha / r = 1; the base frozen."""
    nn = torch.nn

    class LoraLinear(nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base
            self.lora_A = nn.Parameter(torch.empty(r, base.in_features, dtype=torch.float32))
            self.lora_B = nn.Parameter(torch.zeros(base.out_features, r, dtype=torch.float32))
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))

        def forward(self, x):
            return self.base(x) + (x @ self.lora_A.t().to(x.dtype)) @ self.lora_B.t().to(x.dtype)

    for p in model.parameters():
        p.requires_grad_(False)
    for block in model.layers:
        for name in ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]:
            setattr(block, name, LoraLinear(getattr(block, name)))
    return model


def main():
    args = parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        log("peer: torch is not importable (%s)" % e)
        sys.exit(3)
    if args.device == "cuda" and not torch.cuda.is_available():
        log("peer: torch %s sees no CUDA device" % torch.__version__)
        sys.exit(3)
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.init()
        torch.empty(1, device=device)
    cfg = json.load(open(args.config))
    vocab = cfg["vocab_size"]

    impl = args.impl
    if impl == "auto":
        try:
            import transformers  # noqa: F401
            if args.lora:
                import peft  # noqa: F401
            impl = "hf"
        except ImportError:
            impl = "plain"
    if impl == "hf":
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM
        hf_config = AutoConfig.from_pretrained(os.path.dirname(os.path.abspath(args.config)))
        described = "transformers %s" % transformers.__version__
        if args.lora:
            import peft
            described += ", peft %s" % peft.__version__
    else:
        described = "plain PyTorch"

    def build():
        dtype = torch.bfloat16 if args.lora else torch.float32
        if impl == "hf":
            try:
                model = AutoModelForCausalLM.from_config(hf_config, attn_implementation="sdpa",
                                                         dtype=dtype)
            except TypeError:  # transformers before 4.56 names it torch_dtype
                model = AutoModelForCausalLM.from_config(hf_config, attn_implementation="sdpa",
                                                         torch_dtype=dtype)
            if args.lora:
                from peft import LoraConfig, get_peft_model
                model = get_peft_model(model, LoraConfig(
                    r=args.lora, lora_alpha=args.lora, lora_dropout=0.0,
                    target_modules="all-linear", task_type="CAUSAL_LM"))
            forward = lambda ids: model(input_ids=ids).logits  # noqa: E731
        else:
            model = plain_model(torch, cfg).to(dtype)
            if args.lora:
                add_plain_lora(torch, model, args.lora)
            forward = model
        return model.to(device), forward

    batches = []
    for step in range(args.warmup + args.steps):
        ns = argparse.Namespace(seed=args.seed, batch=args.batch, context=args.context,
                                vocab=vocab)
        tokens = torch.tensor(batch_tokens(ns, step), dtype=torch.long).view(
            args.batch, args.context + 1)
        batches.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))

    def synchronize():
        if cuda:
            torch.cuda.synchronize(device)

    def run(mode):
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        torch.manual_seed(args.seed)
        model, forward = build()
        model.train()
        parameters = sum(p.numel() for p in model.parameters())
        trained = [p for p in model.parameters() if p.requires_grad]
        decay = [p for p in trained if p.dim() >= 2]
        no_decay = [p for p in trained if p.dim() < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": args.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=args.lr, betas=(0.9, 0.999), eps=1e-8, fused=cuda)
        step_fn = torch.compile(forward) if mode == "compile" else forward
        losses, timed_ms = [], []
        start = None
        for step, (input_ids, targets) in enumerate(batches):
            if step == args.warmup:
                synchronize()
                start = time.perf_counter()
            t0 = time.perf_counter()
            input_ids = input_ids.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            with torch.autocast(device.type, dtype=torch.bfloat16):
                logits = step_fn(input_ids)
            loss = F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1))
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
        synchronize()
        seconds = time.perf_counter() - start
        result = {"mode": mode,
                  "tokens_per_s": args.steps * args.batch * args.context / seconds,
                  "step_ms": statistics.median(timed_ms),
                  "peak_allocated_bytes": torch.cuda.max_memory_allocated(device) if cuda else 0,
                  "first_loss": losses[0], "last_loss": losses[-1],
                  "parameters": parameters}
        log("torch %-7s %.0f tokens/s (median step %.1f ms); peak allocated %.1f MiB" %
            (mode, result["tokens_per_s"], result["step_ms"],
             result["peak_allocated_bytes"] / 2 ** 20))
        del model, optimizer, step_fn, forward
        return result

    runs = [run(mode) for mode in args.modes.split(",") if mode]
    summary = {"torch": torch.__version__,
               "gpu": torch.cuda.get_device_name(device) if cuda else "cpu",
               "model": described, "runs": runs}
    if args.json:
        print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()

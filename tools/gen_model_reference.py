#!/usr/bin/python3
"""Writes tests/fixtures/models/{gpt2_tiny,llama_tiny}/: two tiny Hugging Face-format checkpoints
(config.json, model.safetensors) and, for each, reference.safetensors holding one batch's inputs,
targets, logits, loss and the gradient of the loss with respect to every parameter, so that the
C++ tests check headroom's GPT-2 and Llama forward and backward passes without needing Python.

The models are plain-PyTorch re-implementations of transformers' GPT2LMHeadModel and
LlamaForCausalLM (eager attention, no dropout): the same computation, the same parameter names
and layouts (GPT-2's Conv1D weights are [in, out]; nn.Linear weights are [out, in]), HF's
_init_weights, then 0.1 * randn added to every parameter (so that no norm weight is exactly 1
and no bias 0, and the activations are large enough for the nonlinearities to matter).
config.json follows what save_pretrained writes (sorted keys, indent 2) for the schema of
transformers 4.45-4.47 (rope_theta / rope_scaling), without "transformers_version".
GPT-2's bos/eos ids are 95 (the last id, as 50256 is in GPT-2's vocabulary) so they fit vocab 96.

reference.safetensors (all F32 unless said):
  input_ids I64 [2, 16], targets I64 [2, 16] (input_ids shifted left by one; -100 = ignored at
  the last position of each row and at a few others), logits [2, 16, 96], loss [] (mean cross
  entropy over the targets != -100), hidden_states.final [2, 16, 32] (the final norm's output),
  grad.<parameter name> for every tensor in model.safetensors (GPT-2's lm_head is tied to
  transformer.wte, which is not saved apart: grad.transformer.wte.weight holds both uses).

The script checks itself before it writes: float32 gradients against float64 autograd and against
float64 central finite differences, RoPE against an explicit rotation of dimension pairs, GQA
against repeat_interleave, causality, and that each safetensors file it wrote parses back to the
same tensors. The output is deterministic (fixed seeds, one CPU thread): rerunning it gives
byte-identical files.

Usage: /usr/bin/python3 tools/gen_model_reference.py [--out tests/fixtures/models]
Needs torch (Debian's python3-torch 1.13 was used) and numpy; not transformers or safetensors.
"""

import argparse
import copy
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SEED = {"gpt2_tiny": 1234, "llama_tiny": 5678}
BATCH, SEQ = 2, 16
IGNORE_INDEX = -100
EXTRA_IGNORED_PER_ROW = 2  # besides the last position
# Added (times randn) to every parameter after HF's init. At 0.02 the activations stay so small
# that gelu_new and exact GELU differ by ~1e-5 in the logits; at 0.1 the pre-activations and
# attention scores are of order one and such mistakes show at ~1e-4 or more.
PERTURB_STD = 0.1

GPT2_CONFIG = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.0,
    "bos_token_id": 95,
    "embd_pdrop": 0.0,
    "eos_token_id": 95,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_embd": 32,
    "n_head": 4,
    "n_inner": None,
    "n_layer": 2,
    "n_positions": 32,
    "reorder_and_upcast_attn": False,
    "resid_pdrop": 0.0,
    "scale_attn_by_inverse_layer_idx": False,
    "scale_attn_weights": True,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 96,
}

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "head_dim": 8,
    "hidden_act": "silu",
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "max_position_embeddings": 32,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "use_cache": True,
    "vocab_size": 96,
}


# ---------------------------------------------------------------------------------------------
# safetensors, written and read by hand

ST_DTYPES = {torch.float32: ("F32", "<f4"), torch.int64: ("I64", "<i8")}
ST_NUMPY = {name: np.dtype(code) for name, code in ST_DTYPES.values()}


def write_safetensors(path, tensors):
    """tensors: {name: tensor}. Data in sorted-name order, header keys sorted, padded to 8."""
    header = {"__metadata__": {"format": "pt"}}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        dtype, code = ST_DTYPES[t.dtype]
        data = t.numpy().astype(code, copy=False).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in chunks:
            f.write(data)


def read_safetensors(path):
    """Parses a file as the format defines it, checking the layout strictly; {name: tensor}."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    assert n % 8 == 0 and 8 + n <= len(blob), (path, n)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    assert header.pop("__metadata__") == {"format": "pt"}
    data = blob[8 + n:]
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    cursor = 0
    tensors = {}
    for begin, end, name in spans:
        entry = header[name]
        dtype = ST_NUMPY[entry["dtype"]]
        assert begin == cursor and end - begin == dtype.itemsize * math.prod(entry["shape"]), name
        array = np.frombuffer(data[begin:end], dtype=dtype).reshape(entry["shape"])
        tensors[name] = torch.from_numpy(array.astype(dtype.newbyteorder("="), copy=True))
        cursor = end
    assert cursor == len(data), path
    return tensors


# ---------------------------------------------------------------------------------------------
# GPT-2 (transformers' GPT2LMHeadModel, eager attention)

class Conv1D(nn.Module):
    """HF's Conv1D: a linear layer whose weight is stored [in, out]; y = x @ W + b."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


def gelu_new(x):
    """HF's NewGELUActivation, the tanh approximation of GELU, evaluated in HF's order (which
    fixes the order in which autograd sums x's three gradient contributions)."""
    return 0.5 * x * (1.0 + torch.tanh(
        math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_dim = cfg["n_embd"]
        self.num_heads = cfg["n_head"]
        self.head_dim = self.embed_dim // self.num_heads
        self.c_attn = Conv1D(3 * self.embed_dim, self.embed_dim)
        self.c_proj = Conv1D(self.embed_dim, self.embed_dim)

    def split_heads(self, x):
        return x.view(x.size()[:-1] + (self.num_heads, self.head_dim)).permute(0, 2, 1, 3)

    def forward(self, x):
        query, key, value = self.c_attn(x).split(self.embed_dim, dim=2)
        query, key, value = (self.split_heads(t) for t in (query, key, value))
        weights = torch.matmul(query, key.transpose(-1, -2))
        weights = weights / torch.full([], value.size(-1) ** 0.5, dtype=weights.dtype)
        n = query.size(-2)
        causal = torch.tril(torch.ones((n, n), dtype=torch.bool))
        weights = torch.where(causal, weights, torch.full([], torch.finfo(weights.dtype).min,
                                                          dtype=weights.dtype))
        weights = F.softmax(weights, dim=-1)
        out = torch.matmul(weights, value).permute(0, 2, 1, 3).contiguous()
        return self.c_proj(out.view(out.size()[:-2] + (self.embed_dim,)))


class GPT2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        inner = cfg["n_inner"] or 4 * cfg["n_embd"]
        self.c_fc = Conv1D(inner, cfg["n_embd"])
        self.c_proj = Conv1D(cfg["n_embd"], inner)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg["n_embd"], eps=cfg["layer_norm_epsilon"])
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(cfg["n_embd"], eps=cfg["layer_norm_epsilon"])
        self.mlp = GPT2MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.wte = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.wpe = nn.Embedding(cfg["n_positions"], cfg["n_embd"])
        self.h = nn.ModuleList(GPT2Block(cfg) for _ in range(cfg["n_layer"]))
        self.ln_f = nn.LayerNorm(cfg["n_embd"], eps=cfg["layer_norm_epsilon"])

    def forward(self, input_ids):
        positions = torch.arange(input_ids.size(-1)).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.transformer = GPT2Model(cfg)

    def forward(self, input_ids):
        hidden = self.transformer(input_ids)
        return hidden, F.linear(hidden, self.transformer.wte.weight)  # lm_head tied to wte

    def init_weights(self):
        """GPT2PreTrainedModel._init_weights, including the scaled c_proj weights."""
        std = self.cfg["initializer_range"]
        for module in self.modules():
            if isinstance(module, (nn.Linear, Conv1D)):
                module.weight.data.normal_(mean=0.0, std=std)
                module.bias.data.zero_()
            elif isinstance(module, nn.Embedding):
                module.weight.data.normal_(mean=0.0, std=std)
            elif isinstance(module, nn.LayerNorm):
                module.bias.data.zero_()
                module.weight.data.fill_(1.0)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                p.data.normal_(mean=0.0, std=std / math.sqrt(2 * self.cfg["n_layer"]))


# ---------------------------------------------------------------------------------------------
# Llama (transformers' LlamaForCausalLM, eager attention)

def upcast_dtype(x):
    """HF computes RMSNorm and the attention softmax in float32; the float64 copy of the model
    that checks the gradients stays in float64."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        input_dtype = x.dtype
        x = x.to(upcast_dtype(x))
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * x.to(input_dtype)


def rope_cos_sin(head_dim, theta, seq_len, dtype):
    """LlamaRotaryEmbedding (no scaling), computed in float32 as HF does, then cast to dtype."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    positions = torch.arange(seq_len, dtype=torch.int64).float()
    freqs = torch.outer(positions, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(x, n_rep):
    batch, kv_heads, slen, head_dim = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(batch, kv_heads, n_rep, slen, head_dim)
    return x.reshape(batch, kv_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.hidden_size = cfg["hidden_size"]
        self.num_heads = cfg["num_attention_heads"]
        self.head_dim = cfg["head_dim"]
        self.num_kv_heads = cfg["num_key_value_heads"]
        self.q_proj = nn.Linear(self.hidden_size, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(self.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(self.hidden_size, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, self.hidden_size, bias=False)

    def forward(self, x):
        bsz, q_len, _ = x.size()
        q = self.q_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.num_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope_cos_sin(self.head_dim, self.cfg["rope_theta"], q_len, x.dtype)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, self.num_heads // self.num_kv_heads)
        v = repeat_kv(v, self.num_heads // self.num_kv_heads)
        weights = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        mask = torch.triu(torch.full((q_len, q_len), torch.finfo(x.dtype).min, dtype=x.dtype),
                          diagonal=1)
        weights = weights + mask
        weights = F.softmax(weights, dim=-1, dtype=upcast_dtype(x)).to(q.dtype)
        out = torch.matmul(weights, v).transpose(1, 2).contiguous()
        return self.o_proj(out.reshape(bsz, q_len, self.num_heads * self.head_dim))


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.gate_proj = nn.Linear(cfg["hidden_size"], cfg["intermediate_size"], bias=False)
        self.up_proj = nn.Linear(cfg["hidden_size"], cfg["intermediate_size"], bias=False)
        self.down_proj = nn.Linear(cfg["intermediate_size"], cfg["hidden_size"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = LlamaAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(LlamaDecoderLayer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = LlamaRMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)

    def forward(self, input_ids):
        hidden = self.model(input_ids)
        return hidden, self.lm_head(hidden)

    def init_weights(self):
        """LlamaPreTrainedModel._init_weights (RMSNorm weights stay 1)."""
        std = self.cfg["initializer_range"]
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.data.normal_(mean=0.0, std=std)
            elif isinstance(module, LlamaRMSNorm):
                module.weight.data.fill_(1.0)


# ---------------------------------------------------------------------------------------------
# checks of the re-implementations against independent formulations

def check_building_blocks():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(3, 5, 40, generator=g, dtype=torch.float64) * 3
    assert torch.allclose(gelu_new(x), F.gelu(x, approximate="tanh"), rtol=1e-12, atol=1e-12)

    # RoPE: HF's half-split form rotates the pair (i, i + d/2) by position * inv_freq[i].
    d, n, theta = 8, 16, 10000.0
    q = torch.randn(2, 3, n, d, generator=g, dtype=torch.float64)
    cos, sin = rope_cos_sin(d, theta, n, torch.float64)
    rotated, _ = apply_rotary_pos_emb(q, q, cos, sin)
    explicit = q.clone()
    for i in range(d // 2):
        angle = torch.arange(n, dtype=torch.float64) * (1.0 / theta ** (2 * i / d))
        a, b = q[..., i], q[..., i + d // 2]
        explicit[..., i] = a * angle.cos() - b * angle.sin()
        explicit[..., i + d // 2] = a * angle.sin() + b * angle.cos()
    assert torch.allclose(rotated, explicit, rtol=0, atol=1e-6), "RoPE"

    kv = torch.randn(2, 2, n, d, generator=g)
    assert torch.equal(repeat_kv(kv, 2), torch.repeat_interleave(kv, 2, dim=1)), "repeat_kv"


def check_causal(model, input_ids):
    """Changing the last token leaves the logits of the earlier positions alone."""
    with torch.no_grad():
        _, a = model(input_ids)
        changed = input_ids.clone()
        changed[:, -1] = (changed[:, -1] + 1) % model.cfg["vocab_size"]
        _, b = model(changed)
    assert torch.allclose(a[:, :-1], b[:, :-1], rtol=0, atol=1e-6), "causality"
    assert not torch.allclose(a[:, -1], b[:, -1]), "last position ignores its own token"


# ---------------------------------------------------------------------------------------------

def perturb(model, g):
    for p in model.parameters():
        p.data.add_(PERTURB_STD * torch.randn(p.shape, generator=g))


def make_batch(vocab_size, g):
    input_ids = torch.randint(0, vocab_size, (BATCH, SEQ), generator=g)
    targets = torch.full_like(input_ids, IGNORE_INDEX)
    targets[:, :-1] = input_ids[:, 1:]
    for row in range(BATCH):
        ignored = torch.randperm(SEQ - 1, generator=g)[:EXTRA_IGNORED_PER_ROW]
        targets[row, ignored] = IGNORE_INDEX
    return input_ids, targets


def loss_and_grads(model, input_ids, targets):
    model.zero_grad(set_to_none=True)
    hidden, logits = model(input_ids)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    return hidden.detach(), logits.detach(), loss.detach(), grads


# Parameters whose gradient is checked against finite differences, at two entries each: the
# largest |gradient| and a random one.
FD_CHECKED = {
    "gpt2": ["transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
             "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_attn.bias",
             "transformer.h.1.mlp.c_fc.bias", "transformer.h.1.mlp.c_proj.weight",
             "transformer.ln_f.bias"],
    "llama": ["model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
              "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
              "model.layers.1.self_attn.v_proj.weight", "model.layers.1.mlp.gate_proj.weight",
              "model.norm.weight", "lm_head.weight"],
}


def check_gradients(model, input_ids, targets, grads32, g):
    """float32 gradients against float64 autograd (all) and float64 finite differences (some)."""
    model64 = copy.deepcopy(model).double()
    _, _, _, grads64 = loss_and_grads(model64, input_ids, targets)
    worst_all = 0.0
    for name, g64 in grads64.items():
        scale = g64.abs().max().item()
        err = (grads32[name].double() - g64).abs().max().item()
        assert scale > 0 and err <= 1e-4 * scale, (name, err, scale)
        worst_all = max(worst_all, err / scale)

    params = dict(model64.named_parameters())

    def loss_at():
        with torch.no_grad():
            _, logits = model64(input_ids)
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                                   ignore_index=IGNORE_INDEX).item()

    chosen = FD_CHECKED[model.cfg["model_type"]]
    h = 1e-5
    worst = 0.0
    for name in chosen:
        p = params[name]
        flat = p.data.view(-1)
        for index in (int(grads64[name].abs().argmax()),
                      int(torch.randint(0, flat.numel(), (1,), generator=g))):
            saved = flat[index].item()
            flat[index] = saved + h
            up = loss_at()
            flat[index] = saved - h
            down = loss_at()
            flat[index] = saved
            fd = (up - down) / (2 * h)
            g32 = grads32[name].view(-1)[index].item()
            g64 = grads64[name].view(-1)[index].item()
            scale = grads64[name].abs().max().item()
            assert abs(fd - g64) <= 1e-6 * scale + 1e-6 * abs(fd), (name, index, fd, g64)
            assert abs(fd - g32) <= 1e-4 * scale + 1e-3 * abs(fd), (name, index, fd, g32)
            worst = max(worst, abs(fd - g32) / scale)
    return worst_all, chosen, worst


def generate(name, out_dir):
    cfg, cls = {"gpt2_tiny": (GPT2_CONFIG, GPT2LMHeadModel),
                "llama_tiny": (LLAMA_CONFIG, LlamaForCausalLM)}[name]
    torch.manual_seed(SEED[name])
    g = torch.Generator().manual_seed(SEED[name])
    model = cls(cfg)
    model.init_weights()
    perturb(model, g)
    input_ids, targets = make_batch(cfg["vocab_size"], g)

    check_causal(model, input_ids)
    hidden, logits, loss, grads = loss_and_grads(model, input_ids, targets)
    worst_all, checked, worst = check_gradients(model, input_ids, targets, grads, g)

    weights = {n: p.detach() for n, p in model.named_parameters()}
    reference = {"input_ids": input_ids, "targets": targets, "logits": logits, "loss": loss,
                 "hidden_states.final": hidden}
    reference.update({f"grad.{n}": t for n, t in grads.items()})

    directory = os.path.join(out_dir, name)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    for file, tensors in (("model.safetensors", weights), ("reference.safetensors", reference)):
        path = os.path.join(directory, file)
        write_safetensors(path, tensors)
        back = read_safetensors(path)
        assert sorted(back) == sorted(tensors), path
        for key, t in tensors.items():
            assert back[key].dtype == t.dtype and torch.equal(back[key], t), (path, key)

    print(f"{name}: loss {loss.item():.9g} over {int((targets != IGNORE_INDEX).sum())} targets, "
          f"{sum(t.numel() for t in weights.values())} parameters in {len(weights)} tensors; "
          f"float32 gradients within {worst_all:.1e} of float64 autograd's, and within "
          f"{worst:.1e} of finite differences on {len(checked)} tensors (of each max |grad|)",
          file=sys.stderr)


def main():
    default_out = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests",
                               "fixtures", "models")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.normpath(default_out))
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    check_building_blocks()
    for name in SEED:
        generate(name, args.out)


if __name__ == "__main__":
    main()

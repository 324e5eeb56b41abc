#!/usr/bin/python3
"""Writes tests/fixtures/optim/{sgd,lion,adafactor,lomo}_golden.txt: what SGD, Lion, Adafactor and
LOMO do to three small fp32 parameters over 10 steps on fixed gradients, so that
tests/optim/test_{sgd,lion,adafactor,lomo}.cpp check headroom's optimizers without needing Python.

References:
  sgd        torch.optim.SGD itself (foreach=False), torch 1.13 from Debian's python3-torch.
  lion       the update rule of lion_pytorch (google/automl), transcribed in NumPy float32.
  adafactor  transformers.optimization.Adafactor.step() transcribed line by line in torch
             (transformers is not installed here); each case also names HF's options.
  lomo       the update of OpenLMLab/LOMO's Lomo.fuse_update in NumPy float32: value clipping,
             then the clip coefficient of the two-pass global norm, then decay and the step.

Parameters: "w" [5, 3] (a matrix), "b" [7] (a vector), "t" [2, 3, 4] (a stack of matrices, which
Adafactor factors over the last two dimensions), drawn from randn; gradients randn per step, one
element exactly 0 per step. Each optimizer runs a few cases (options below), all 10 steps.

Fixture lines (float32 values printed with 9 significant digits, which round-trip):
  case <name> <key>=<value> ...   options of the case that follows (None: unset)
  param <name> <ndim> <dims...>
  init <name> <values...>         shared by every case of the file
  grad <step> <name> <values...>  shared by every case of the file
  value <case> <step> <name> <values...>  the parameter after the step

Usage: /usr/bin/python3 tools/gen_optim_golden.py [--out-dir tests/fixtures/optim]
"""

import argparse
import math
import os

import numpy as np
import torch

STEPS = 10
PARAMS = [("w", [5, 3]), ("b", [7]), ("t", [2, 3, 4])]

SGD_CASES = [
    ("plain", dict(lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False)),
    ("momentum", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01, nesterov=False)),
    ("nesterov", dict(lr=0.05, momentum=0.8, dampening=0.0, weight_decay=0.02, nesterov=True)),
]
LION_CASES = [
    ("default", dict(lr=1e-4, beta1=0.9, beta2=0.99, weight_decay=0.0)),
    ("decay", dict(lr=3e-3, beta1=0.95, beta2=0.98, weight_decay=0.1)),
]
ADAFACTOR_CASES = [
    # HF's defaults: relative step size, scaled by the parameter's RMS.
    ("hf_defaults", dict(lr=None, eps1=1e-30, eps2=1e-3, clip_threshold=1.0, decay_rate=-0.8,
                         beta1=None, weight_decay=0.0, scale_parameter=True, relative_step=True,
                         warmup_init=False)),
    # HF Trainer's `adafactor`: external lr.
    ("trainer", dict(lr=0.01, eps1=1e-30, eps2=1e-3, clip_threshold=1.0, decay_rate=-0.8,
                     beta1=None, weight_decay=0.0, scale_parameter=False, relative_step=False,
                     warmup_init=False)),
    # First moment, decay, warm-up init, and a clip threshold that bites.
    ("beta1_warmup", dict(lr=None, eps1=1e-30, eps2=1e-3, clip_threshold=0.5, decay_rate=-0.8,
                          beta1=0.9, weight_decay=0.05, scale_parameter=True, relative_step=True,
                          warmup_init=True)),
]
LOMO_CASES = [
    ("plain", dict(lr=0.01, weight_decay=0.0, clip_grad_norm=None, clip_grad_value=None)),
    ("value_decay", dict(lr=0.02, weight_decay=0.1, clip_grad_norm=None, clip_grad_value=0.5)),
    ("norm", dict(lr=0.05, weight_decay=0.0, clip_grad_norm=1.5, clip_grad_value=None)),
]


def fmt(values):
    return " ".join("%.9g" % v for v in np.asarray(values, dtype=np.float32).reshape(-1).tolist())


def fmt_options(options):
    return " ".join("%s=%s" % (k, "None" if v is None else ("%.9g" % v if isinstance(v, float)
                                                            else str(v)))
                    for k, v in options.items())


def run_sgd(init, grads, o):
    params = {n: torch.tensor(v).requires_grad_(True) for n, v in init.items()}
    opt = torch.optim.SGD(list(params.values()), lr=o["lr"], momentum=o["momentum"],
                          dampening=o["dampening"], weight_decay=o["weight_decay"],
                          nesterov=o["nesterov"], foreach=False)
    out = []
    for step in range(STEPS):
        for n, p in params.items():
            p.grad = torch.tensor(grads[step][n])
        opt.step()
        out.append({n: p.detach().numpy().copy() for n, p in params.items()})
    return out


def run_lion(init, grads, o):
    f = np.float32
    params = {n: v.copy() for n, v in init.items()}
    exp_avg = {n: np.zeros_like(v) for n, v in init.items()}
    decay = f(1.0 - o["lr"] * o["weight_decay"])
    b1, b2, lr = f(o["beta1"]), f(o["beta2"]), f(o["lr"])
    one_minus_b1, one_minus_b2 = f(1.0 - o["beta1"]), f(1.0 - o["beta2"])
    out = []
    for step in range(STEPS):
        for n in params:
            g, m = grads[step][n], exp_avg[n]
            params[n] = params[n] * decay
            update = np.sign(m * b1 + g * one_minus_b1).astype(np.float32)
            params[n] = params[n] - update * lr
            exp_avg[n] = m * b2 + g * one_minus_b2
        out.append({n: v.copy() for n, v in params.items()})
    return out


class HfAdafactor:
    """transformers.optimization.Adafactor (v4.40), its step() for one group, fp32 params."""

    def __init__(self, params, o):
        self.params, self.o, self.state = params, o, {n: {} for n in params}

    def _get_lr(self, state):
        o = self.o
        rel_step_sz = o["lr"]
        if o["relative_step"]:
            min_step = 1e-6 * state["step"] if o["warmup_init"] else 1e-2
            rel_step_sz = min(min_step, 1.0 / math.sqrt(state["step"]))
        param_scale = 1.0
        if o["scale_parameter"]:
            param_scale = max(o["eps2"], state["RMS"])
        return param_scale * rel_step_sz

    @staticmethod
    def _rms(tensor):
        return tensor.norm(2) / (tensor.numel() ** 0.5)

    @staticmethod
    def _approx_sq_grad(row, col):
        r_factor = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
        c_factor = col.unsqueeze(-2).rsqrt()
        return torch.mul(r_factor, c_factor)

    @torch.no_grad()
    def step(self):
        o = self.o
        for n, p in self.params.items():
            grad = p.grad
            state = self.state[n]
            factored, use_first_moment = len(grad.shape) >= 2, o["beta1"] is not None
            if len(state) == 0:
                state["step"] = 0
                if use_first_moment:
                    state["exp_avg"] = torch.zeros_like(grad)
                if factored:
                    state["exp_avg_sq_row"] = torch.zeros(grad.shape[:-1]).to(grad)
                    state["exp_avg_sq_col"] = torch.zeros(grad.shape[:-2] + grad.shape[-1:]).to(grad)
                else:
                    state["exp_avg_sq"] = torch.zeros_like(grad)
                state["RMS"] = 0
            state["step"] += 1
            state["RMS"] = self._rms(p)
            lr = self._get_lr(state)
            beta2t = 1.0 - math.pow(state["step"], o["decay_rate"])
            update = (grad ** 2) + o["eps1"]
            if factored:
                row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
                row.mul_(beta2t).add_(update.mean(dim=-1), alpha=(1.0 - beta2t))
                col.mul_(beta2t).add_(update.mean(dim=-2), alpha=(1.0 - beta2t))
                update = self._approx_sq_grad(row, col)
                update.mul_(grad)
            else:
                v = state["exp_avg_sq"]
                v.mul_(beta2t).add_(update, alpha=(1.0 - beta2t))
                update = v.rsqrt().mul_(grad)
            update.div_((self._rms(update) / o["clip_threshold"]).clamp_(min=1.0))
            update.mul_(lr)
            if use_first_moment:
                exp_avg = state["exp_avg"]
                exp_avg.mul_(o["beta1"]).add_(update, alpha=(1 - o["beta1"]))
                update = exp_avg
            if o["weight_decay"] != 0:
                # HF writes alpha=(-wd * lr); lr is a 0-d tensor when scale_parameter, which
                # add_'s alpha does not take, so it is made a Python float first.
                p.add_(p, alpha=float(-o["weight_decay"] * lr))
            p.add_(-update)


def run_adafactor(init, grads, o):
    params = {n: torch.tensor(v) for n, v in init.items()}
    opt = HfAdafactor(params, o)
    out = []
    for step in range(STEPS):
        for n, p in params.items():
            p.grad = torch.tensor(grads[step][n])
        opt.step()
        out.append({n: p.numpy().copy() for n, p in params.items()})
    return out


def run_lomo(init, grads, o):
    f = np.float32
    params = {n: v.copy() for n, v in init.items()}
    lr = f(o["lr"])
    out = []
    for step in range(STEPS):
        clip_coef = None
        if o["clip_grad_norm"] is not None:
            # Pass 0: per-tensor norms, then the norm of those (torch.norm(torch.stack(norms))).
            norms = np.array([np.sqrt(np.sum(grads[step][n].astype(np.float64) ** 2))
                              for n in params], dtype=np.float32)
            total = f(np.sqrt(np.sum(norms.astype(np.float64) ** 2)))
            clip_coef = min(f(1.0), f(o["clip_grad_norm"]) / (total + f(1e-6)))
        for n in params:
            g = grads[step][n].copy()
            if o["clip_grad_value"] is not None:
                g = np.clip(g, -f(o["clip_grad_value"]), f(o["clip_grad_value"]))
            if clip_coef is not None:
                g = g * clip_coef
            p = params[n]
            if o["weight_decay"] > 0:
                p = p * f(1.0 - o["lr"] * o["weight_decay"])
            params[n] = p - g * lr
        out.append({n: v.copy() for n, v in params.items()})
    return out


def write(path, title, cases, runner, init, grads):
    lines = ["# %s golden values. Written by tools/gen_optim_golden.py (see its docstring); "
             "do not edit. torch %s, numpy %s." % (title, torch.__version__, np.__version__)]
    for name, shape in PARAMS:
        lines.append("param %s %d %s" % (name, len(shape), " ".join(map(str, shape))))
    for name, _ in PARAMS:
        lines.append("init %s %s" % (name, fmt(init[name])))
    for step in range(STEPS):
        for name, _ in PARAMS:
            lines.append("grad %d %s %s" % (step + 1, name, fmt(grads[step][name])))
    for case, options in cases:
        lines.append("case %s %s" % (case, fmt_options(options)))
        for step, values in enumerate(runner(init, grads, options)):
            for name, _ in PARAMS:
                lines.append("value %s %d %s %s" % (case, step + 1, name, fmt(values[name])))
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")
    print("wrote", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default=os.path.join(os.path.dirname(__file__), "..",
                                                          "tests", "fixtures", "optim"))
    args = parser.parse_args()
    torch.manual_seed(20251105)
    torch.set_num_threads(1)
    init = {n: torch.randn(shape).numpy() for n, shape in PARAMS}
    grads = []
    for step in range(STEPS):
        per_step = {}
        for n, shape in PARAMS:
            g = torch.randn(shape).numpy()
            g.reshape(-1)[step % g.size] = 0.0
            per_step[n] = g
        grads.append(per_step)
    os.makedirs(args.out_dir, exist_ok=True)
    write(os.path.join(args.out_dir, "sgd_golden.txt"), "torch.optim.SGD", SGD_CASES, run_sgd,
          init, grads)
    write(os.path.join(args.out_dir, "lion_golden.txt"), "Lion (lion_pytorch's rule, NumPy)",
          LION_CASES, run_lion, init, grads)
    write(os.path.join(args.out_dir, "adafactor_golden.txt"),
          "transformers.optimization.Adafactor (step() transcribed in torch)", ADAFACTOR_CASES,
          run_adafactor, init, grads)
    write(os.path.join(args.out_dir, "lomo_golden.txt"), "LOMO (Lomo.fuse_update's rule, NumPy)",
          LOMO_CASES, run_lomo, init, grads)


if __name__ == "__main__":
    main()

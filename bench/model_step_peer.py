"""The transformers side of bench/model_step: the model of a config.json headroom wrote
(AutoModelForCausalLM.from_config, HF's init), AdamW, the same token batches, timed in eager
mode and again under torch.compile, on the CPU with the thread count given.

Prints a line per step and, per mode, one "RESULT mode=... key=value ..." line that
bench/model_step parses. Needs torch and transformers (the venv of tools/).
"""
import argparse
import json
import resource
import time

import torch


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--batches", required=True, help="JSON: a list of [batch][context + 1] ids")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--modes", default="eager,compile")
    args = parser.parse_args()

    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    batches = [torch.tensor(b, dtype=torch.long) for b in json.load(open(args.batches))]
    config = AutoConfig.from_pretrained(args.model_dir)
    print("peer: torch %s, transformers %s, %d threads" %
          (torch.__version__, transformers.__version__, torch.get_num_threads()))
    for mode in args.modes.split(","):
        torch.manual_seed(1234)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.train()
        decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": args.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr)
        forward = torch.compile(model) if mode == "compile" else model
        rss_before = peak_rss_bytes()
        times, losses = [], []
        for step, tokens in enumerate(batches):
            inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                logits = forward(input_ids=inputs).logits
            loss = torch.nn.functional.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            seconds = time.perf_counter() - start
            losses.append(loss.item())
            warm = step < args.warmup
            print("peer %s: step %2d%s loss %.4f  %8.1f ms" %
                  (mode, step, " warm-up" if warm else "        ", losses[-1], seconds * 1e3),
                  flush=True)
            if not warm:
                times.append(seconds)
        times.sort()
        n = len(times)
        median = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
        tokens_per_step = batches[0].shape[0] * (batches[0].shape[1] - 1)
        print("RESULT mode=%s step_ms=%.3f tokens_per_s=%.3f rss_growth=%d first_loss=%.6f "
              "last_loss=%.6f torch=%s transformers=%s" %
              (mode, median * 1e3, tokens_per_step / median, peak_rss_bytes() - rss_before,
               losses[0], losses[-1], torch.__version__, transformers.__version__), flush=True)
        del model, optimizer, forward


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Golden figures for `headroom eval --json` on SFT data: the token-weighted mean cross-entropy that transformers
gives over the scored tokens of the rows TRL prepares, for a tiny Qwen2 model whose vocabulary covers the qwen2
fixture tokenizer.

Writes
  tests/fixtures/models/qwen2_sft_tiny/      Qwen2ForCausalLM (transformers, torch.manual_seed(0)) saved with
                                             save_pretrained (config.json, generation_config.json,
                                             model.safetensors), plus tests/fixtures/tokenizer/qwen2's
                                             tokenizer.json and tokenizer_config.json, the latter with a
                                             "chat_template": tests/fixtures/chat_template/qwen2_5.json's template
                                             (it has {% generation %} marks)
  tests/fixtures/data/sft_eval/*.jsonl       prompt_completion (plain strings), messages (conversations) and
                                             chat_prompt_completion (conversational prompt / completion) rows
  tests/fixtures/data/sft_eval/reference.json
      "generator" and, keyed by the evaluation's name, the data file, TRL's loss options, "loss" (sum of
      cross-entropy over the scored tokens of all rows / their count), "tokens" (that count) and "per_row_tokens".

    /work/venv/bin/pip install trl==1.16.0      # with torch, transformers 5.25, datasets
    /work/venv/bin/python tools/gen_sft_eval_reference.py

The model: vocab_size = len(tokenizer) rounded up to a multiple of 8, hidden 32, intermediate 64, 2 layers, 4 heads,
2 key / value heads, rope_theta 1e6, untied head, float32; every parameter drawn from N(0, 0.1^2) (the q / k / v
biases too, so they matter) and every RMSNorm weight from N(1, 0.05^2), so that the logits are not near-uniform
(their spread over the vocabulary is about 0.6).

The rows: SFTTrainer._prepare_dataset (trl/trainer/sft_trainer.py) runs unbound on a stand-in object, set up the
way SFTTrainer.__init__ sets it (tools/gen_trl_sft_golden.py's fake_init), with max_length 1024, no packing, no
shuffling and the tokenizer loaded from the model directory by AutoTokenizer.from_pretrained, so that the chat
template comes from the tokenizer_config.json written there. The score: the model, loaded back from the directory
(float32, eval mode, eager attention, one thread), runs each prepared row's input_ids alone (batch of 1, no
padding); logits[:-1] against labels[1:] (TRL's labels are not shifted; -100 is not scored), cross-entropy summed in
float64 from the float32 logits; each row's mean is checked against transformers' own loss (model(..., labels=)),
which shifts the labels itself. Prints one line an evaluation. The output is the same byte for byte from run to run.
"""
import json
import logging
import os
import shutil
import sys
import tempfile
import warnings

import datasets
import torch
import transformers
import trl
from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
from trl import SFTConfig, SFTTrainer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_trl_sft_golden import dump, fake_init  # noqa: E402  (the stand-in for SFTTrainer.__init__)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
MODEL_DIR = os.path.join(ROOT, "tests", "fixtures", "models", "qwen2_sft_tiny")
DATA_DIR = os.path.join(ROOT, "tests", "fixtures", "data", "sft_eval")
TOKENIZER_DIR = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "qwen2")
TEMPLATE = os.path.join(ROOT, "tests", "fixtures", "chat_template", "qwen2_5.json")

MAX_LENGTH = 1024
SEED = 0
INIT_STD = 0.1
NORM_STD = 0.05


def messages(*turns):
    return [{"role": role, "content": content} for role, content in turns]


PROMPT_COMPLETION = [
    {"prompt": "The capital of France is", "completion": " Paris."},
    # The prompt's last space merges with the completion's first token: TRL starts the completion where the
    # tokenized prompt and prompt + completion diverge.
    {"prompt": "Translate to French: cheese = ", "completion": "fromage"},
    {"prompt": "Say it with accents:", "completion": " café – naïve 日本"},
    {"prompt": "2 + 2 =", "completion": " 4"},
    {"prompt": "Q: What colour is the sky?\nA:", "completion": " Blue, on a clear day."},
]

MESSAGES = [
    {"messages": messages(("system", "You are terse."), ("user", "Hello!"), ("assistant", "Hi."))},
    # No system turn: the template writes its default one.
    {"messages": messages(("user", "Spell café – naïve"), ("assistant", "c-a-f-é, n-a-ï-v-e."))},
    {"messages": messages(("user", "One?"), ("assistant", "1"), ("user", "Two?"), ("assistant", "2"),
                          ("user", "Three?"), ("assistant", "3"))},
    {"messages": messages(("system", "Answer in French."), ("user", "Where is the museum?"),
                          ("assistant", "Là-bas, près du café."), ("user", "Thanks!"),
                          ("assistant", "De rien."))},
]

CHAT_PROMPT_COMPLETION = [
    {"prompt": messages(("system", "You are terse."), ("user", "Capital of France?")),
     "completion": messages(("assistant", "Paris."))},
    {"prompt": messages(("user", "Say naïve in Japanese.")), "completion": messages(("assistant", "ナイーブ"))},
    {"prompt": messages(("user", "One?"), ("assistant", "1"), ("user", "Two?")),
     "completion": messages(("assistant", "2"))},
]

FILES = {
    "prompt_completion.jsonl": PROMPT_COMPLETION,
    "messages.jsonl": MESSAGES,
    "chat_prompt_completion.jsonl": CHAT_PROMPT_COMPLETION,
}

# name -> (file, completion_only_loss, assistant_only_loss)
EVALUATIONS = [
    ("prompt_completion", "prompt_completion.jsonl", None, False),
    ("prompt_completion_full", "prompt_completion.jsonl", False, False),
    ("messages", "messages.jsonl", None, False),
    ("messages_assistant_only", "messages.jsonl", None, True),
    ("chat_prompt_completion", "chat_prompt_completion.jsonl", None, False),
]


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=2)
        f.write("\n")


def make_model():
    """Builds and saves the model, copies the tokenizer files in with the chat template; returns the config."""
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER_DIR)
    vocab_size = (len(tokenizer) + 7) // 8 * 8
    # Qwen2.5-Instruct's layout: bos <|endoftext|>, eos <|im_end|>.
    bos, eos = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    torch.manual_seed(SEED)
    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=False,
        bos_token_id=bos, eos_token_id=eos, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        dtype="float32", attn_implementation="eager")
    model = Qwen2ForCausalLM(config).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                torch.nn.init.normal_(p, mean=1.0, std=NORM_STD)
            else:
                torch.nn.init.normal_(p, std=INIT_STD)
    if os.path.isdir(MODEL_DIR):
        shutil.rmtree(MODEL_DIR)
    os.makedirs(MODEL_DIR)
    model.save_pretrained(MODEL_DIR, safe_serialization=True)
    # save_pretrained leaves model.safetensors readable by its owner only (0600).
    os.chmod(os.path.join(MODEL_DIR, "model.safetensors"), 0o644)

    shutil.copyfile(os.path.join(TOKENIZER_DIR, "tokenizer.json"), os.path.join(MODEL_DIR, "tokenizer.json"))
    with open(os.path.join(TOKENIZER_DIR, "tokenizer_config.json"), encoding="utf-8") as f:
        tokenizer_config = json.load(f)
    with open(TEMPLATE, encoding="utf-8") as f:
        tokenizer_config["chat_template"] = json.load(f)["template"]
    write_json(os.path.join(MODEL_DIR, "tokenizer_config.json"), tokenizer_config)
    return config


def write_data():
    os.makedirs(DATA_DIR, exist_ok=True)
    for name, rows in FILES.items():
        with open(os.path.join(DATA_DIR, name), "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


def read_rows(name):
    with open(os.path.join(DATA_DIR, name), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def prepare(rows, completion_only_loss, assistant_only_loss):
    """TRL's prepared rows for `rows`, with a fresh tokenizer from the model directory."""
    dataset = datasets.Dataset.from_list(rows)
    # Arrow would give every row the first row's keys and every struct the union of its keys; these rows are already
    # in that form, so TRL sees exactly what the file holds.
    assert dataset.to_list() == rows
    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    assert tokenizer.chat_template is not None
    with tempfile.TemporaryDirectory() as tmp:
        # bf16=False: SFTConfig defaults to bf16, which it refuses on a machine without a GPU.
        args = SFTConfig(output_dir=tmp, shuffle_dataset=False, dataset_num_proc=None, report_to=[], bf16=False,
                         max_length=MAX_LENGTH, packing=False, completion_only_loss=completion_only_loss,
                         assistant_only_loss=assistant_only_loss)
        self = fake_init(tokenizer, args, dataset)
        # The template has {% generation %} marks: TRL keeps it rather than swap in its own training template.
        assert self.chat_template is None
        prepared = SFTTrainer._prepare_dataset(self, dataset, tokenizer, args, args.packing, None, "eval")
    assert len(prepared) == len(rows), "no row may be dropped"
    return [list(map(int, r)) for r in prepared["input_ids"]], [list(map(int, r)) for r in prepared["labels"]]


@torch.no_grad()
def score(model, input_ids, labels):
    """(sum of cross-entropy, count) over the scored tokens of one row."""
    ids = torch.tensor([input_ids])
    target = torch.tensor(labels[1:])
    logits = model(input_ids=ids).logits[0, :-1]
    assert logits.dtype == torch.float32
    total = torch.nn.functional.cross_entropy(logits.double(), target, reduction="sum", ignore_index=-100)
    count = int((target != -100).sum())
    # transformers' own loss (it shifts the labels itself; float32 mean) agrees.
    mean = model(input_ids=ids, labels=torch.tensor([labels])).loss
    assert abs(mean.item() - float(total) / count) < 1e-5, (mean.item(), float(total) / count)
    return float(total), count


def main():
    datasets.disable_progress_bars()
    datasets.disable_caching()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    logging.getLogger("trl").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    config = make_model()
    write_data()
    model = Qwen2ForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32, attn_implementation="eager").eval()
    assert model.config.vocab_size == config.vocab_size

    evaluations = {}
    for name, file, completion_only_loss, assistant_only_loss in EVALUATIONS:
        input_ids, labels = prepare(read_rows(file), completion_only_loss, assistant_only_loss)
        total, count, per_row = 0.0, 0, []
        for ids, lab in zip(input_ids, labels):
            assert len(ids) == len(lab) <= MAX_LENGTH
            assert max(ids) < config.vocab_size
            s, n = score(model, ids, lab)
            total += s
            count += n
            per_row.append(n)
        loss = total / count
        evaluations[name] = {"file": file,
                             "options": {"completion_only_loss": completion_only_loss,
                                         "assistant_only_loss": assistant_only_loss},
                             "loss": loss, "tokens": count, "per_row_tokens": per_row}
        print(f"{name:26s} {file:30s} loss {loss:.10f}  ppl {torch.tensor(loss).exp().item():10.4f}  "
              f"tokens {count:4d}  per row {per_row}  (lengths {[len(r) for r in input_ids]})")

    doc = {"generator": f"transformers {transformers.__version__}, trl {trl.__version__}, torch {torch.__version__}",
           **evaluations}
    out = os.path.join(DATA_DIR, "reference.json")
    with open(out, "w", encoding="utf-8") as f:
        f.write(dump(doc))
        f.write("\n")
    print(f"wrote {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Golden SFT datasets made by TRL itself: SFTTrainer._prepare_dataset (trl/trainer/sft_trainer.py) on small
datasets.Dataset rows (language modeling text, prompt / completion, conversational messages and conversational
prompt / completion), with the fixture tokenizers of tests/fixtures/tokenizer and the chat templates of
tests/fixtures/chat_template. Records TRL's input_ids and labels (-100 where not scored), the packed rows'
seq_lengths, which input rows survive truncation, or the error TRL raises. Writes tests/fixtures/data/trl_sft.json.

    /work/venv/bin/pip install trl==1.16.0
    /work/venv/bin/python tools/gen_trl_sft_golden.py

No model is built: the parts of SFTTrainer.__init__ that _prepare_dataset depends on (the eos_token override, the
assistant_only_loss checks and training-template swap, the completion_only_loss default, the pad token) are repeated
on a stand-in object, and the real _prepare_dataset runs unbound on it. Prints one line a case; the output is the
same byte for byte from run to run.
"""
import json
import logging
import os
import sys
import tempfile
import types
import warnings

import datasets
import transformers
import trl
from transformers import AutoTokenizer
from trl import SFTConfig, SFTTrainer
from trl.chat_template_utils import get_training_chat_template, has_generation_markers
from trl.data_utils import is_conversational

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "data", "trl_sft.json")
TOKENIZERS = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
TEMPLATES = os.path.join(ROOT, "tests", "fixtures", "chat_template")

# The Llama 3 fixture template prints "Date today: " from strftime_now unless date_string is given, so every llama3
# conversational row carries it; tokenize_fn passes a row's chat_template_kwargs to apply_chat_template.
DATE = {"date_string": "26 Jul 2024"}

UNI = "café – naïve 日本"


def template(name):
    with open(os.path.join(TEMPLATES, f"{name}.json"), encoding="utf-8") as f:
        return json.load(f)["template"]


# The fixture Llama 3 template has no {% generation %} marks; this one has them in the Llama 3 layout, the end of turn
# inside the span so that the model is trained to stop.
LLAMA3_GENERATION = r"""{{- bos_token }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}
    {%- if message['role'] == 'assistant' %}
        {%- generation %}
        {{- message['content'] | trim + '<|eot_id|>' }}
        {%- endgeneration %}
    {%- else %}
        {{- message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
"""

# Each tokenizer with the chat template written in its model family's style.
PAIRS = {"llama3": "llama3", "qwen2": "qwen2_5", "mistral": "mistral", "gemma": "gemma2", "phi3": "phi3"}


def load_tokenizer(name, chat_template):
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(TOKENIZERS, name))
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    return tokenizer


def fake_init(tokenizer, args, dataset):
    """The attributes SFTTrainer.__init__ sets that _prepare_dataset reads, set the way __init__ sets them."""
    self = types.SimpleNamespace(_tokenizer=tokenizer)
    if args.eos_token is not None:
        if args.eos_token not in tokenizer.get_vocab():
            raise ValueError(
                f"The specified `eos_token` ('{args.eos_token}') is not found in the vocabulary of the given "
                f"`processing_class` ({tokenizer.__class__.__name__}). Ensure that the `eos_token` exists "
                "in the vocabulary before using it as an EOS token.")
        tokenizer.eos_token = args.eos_token
    sample = next(iter(dataset))
    if args.assistant_only_loss and not is_conversational(sample):
        raise ValueError(
            "You set `assistant_only_loss=True`, but the dataset is not conversational. This option is only "
            "supported for conversational datasets.")
    if args.assistant_only_loss and not has_generation_markers(tokenizer.chat_template):
        self.chat_template = get_training_chat_template(tokenizer)
    else:
        self.chat_template = None
    if args.completion_only_loss is None:
        self.completion_only_loss = "prompt" in sample and "completion" in sample
    else:
        self.completion_only_loss = args.completion_only_loss
    tokenizer.pad_token = args.pad_token or tokenizer.pad_token or tokenizer.eos_token
    return self


def prepare(tokenizer_name, chat_template, options, dataset):
    """Returns the prepared dataset, or the exception TRL raised (from __init__'s checks or _prepare_dataset)."""
    tokenizer = load_tokenizer(tokenizer_name, chat_template)
    with tempfile.TemporaryDirectory() as tmp:
        # bf16=False: SFTConfig defaults to bf16, which it refuses on a machine without a GPU.
        args = SFTConfig(output_dir=tmp, shuffle_dataset=False, dataset_num_proc=None, report_to=[], bf16=False,
                         **options)
        try:
            self = fake_init(tokenizer, args, dataset)
            return SFTTrainer._prepare_dataset(self, dataset, tokenizer, args, args.packing, None, "train")
        except Exception as e:  # what TRL, or the template it renders, raises
            return e


def ints(rows):
    return [[int(x) for x in r] for r in rows]


def case(name, tokenizer, chat_template, rows, max_length=1024, completion_only_loss=None, assistant_only_loss=False,
         packing=False, packing_strategy="bfd", eos_token=None, dataset_text_field="text", normalize=True,
         expect_error=False):
    options = {"max_length": max_length, "completion_only_loss": completion_only_loss,
               "assistant_only_loss": assistant_only_loss, "packing": packing, "packing_strategy": packing_strategy,
               "eos_token": eos_token, "dataset_text_field": dataset_text_field}
    if normalize:
        # Arrow gives every row the first row's keys and every struct the union of its keys (missing ones as None).
        # The fixture's rows are already in that form, so they come back from Arrow as they are and a reader that
        # renders them sees what TRL's template saw.
        rows = datasets.Dataset.from_list(rows).to_list()
    dataset = datasets.Dataset.from_list(rows)
    assert not normalize or dataset.to_list() == rows, name
    out = {"name": name, "tokenizer": tokenizer, "chat_template": chat_template, "options": options, "rows": rows}
    result = prepare(tokenizer, chat_template, options, dataset)
    # A case that fails unexpectedly (a setup problem, say) must not become a golden error.
    assert isinstance(result, Exception) == expect_error, f"{name}: {result!r}"
    if isinstance(result, Exception):
        out["error"] = {"type": type(result).__name__, "message": str(result)}
        print(f"{name:44s} {tokenizer:8s} {len(rows)} rows -> {type(result).__name__}: {str(result)[:60]}")
        return out
    expected = {"input_ids": ints(result["input_ids"]), "labels": ints(result["labels"])}
    if packing:
        # "wrapped" packing makes no seq_lengths column.
        expected["seq_lengths"] = ints(result["seq_lengths"]) if "seq_lengths" in result.column_names else None
        expected["kept"] = None
    else:
        # Truncation may drop rows; the rows' indices, carried through TRL's maps as an extra column that it keeps,
        # say which. The run without that column must give the same rows.
        indexed = prepare(tokenizer, chat_template, options, dataset.add_column("row_index_", list(range(len(rows)))))
        assert indexed["input_ids"] == result["input_ids"] and indexed["labels"] == result["labels"], name
        expected["seq_lengths"] = None
        expected["kept"] = [int(i) for i in indexed["row_index_"]]
    out["expected"] = expected
    scored = sum(sum(t != -100 for t in r) for r in expected["labels"])
    tokens = sum(len(r) for r in expected["input_ids"])
    print(f"{name:44s} {tokenizer:8s} {len(rows)} rows -> {len(expected['input_ids'])} rows, {tokens} tokens, "
          f"{scored} scored")
    return out


def messages(*turns):
    return [{"role": role, "content": content} for role, content in turns]


TEXTS = [
    {"text": "The quick brown fox jumps over the lazy dog."},
    {"text": UNI},
    {"text": "Line one\nline two\n\n  indented"},
    {"text": ""},
]

PROMPT_COMPLETION = [
    {"prompt": "The capital of France is", "completion": " Paris."},
    # The prompt ends with a space the completion's first token would absorb: the tokenized prompt is then not a
    # prefix of the tokenized prompt + completion, and TRL starts the completion where the two diverge.
    {"prompt": "Translate to French: cheese = ", "completion": "fromage"},
    {"prompt": "Say it with accents:", "completion": " " + UNI},
    {"prompt": "2 + 2 =", "completion": " 4"},
]

CHAT = [
    {"messages": messages(("system", "You are terse."), ("user", "Hello!"), ("assistant", "Hi."))},
    {"messages": messages(("user", "Spell " + UNI), ("assistant", UNI))},
    {"messages": messages(("user", "One?"), ("assistant", "1"), ("user", "Two?"), ("assistant", "2"))},
]

# Gemma 2's template refuses a system turn.
CHAT_NO_SYSTEM = [
    {"messages": messages(("user", "Hello!"), ("assistant", "Hi."))},
    CHAT[1],
    CHAT[2],
]

CHAT_PROMPT_COMPLETION = [
    {"prompt": messages(("system", "You are terse."), ("user", "Capital of France?")),
     "completion": messages(("assistant", "Paris."))},
    {"prompt": messages(("user", "Spell " + UNI)), "completion": messages(("assistant", UNI))},
    {"prompt": messages(("user", "One?"), ("assistant", "1"), ("user", "Two?")),
     "completion": messages(("assistant", "2"))},
]

CHAT_PROMPT_COMPLETION_NO_SYSTEM = [
    {"prompt": messages(("user", "Capital of France?")), "completion": messages(("assistant", "Paris."))},
    *CHAT_PROMPT_COMPLETION[1:],
]

MULTI_TURN = [
    {"messages": messages(("user", "Où est le café ?"), ("assistant", "Là-bas – près du musée."),
                          ("user", "日本語で?"), ("assistant", "あそこです。"))},
    {"messages": messages(("user", "naïve?"), ("assistant", "Yes, naïve."), ("user", "Sure?"),
                          ("assistant", "Quite sure."))},
]

WEATHER_TOOLS = json.dumps([{
    "type": "function",
    "function": {"name": "get_weather", "description": "Weather in a city.",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}}}])


def tool_conversation(call_id=None, arguments=None):
    arguments = arguments or {"city": "Zürich"}
    call = {"type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    if call_id is not None:
        call["id"] = call_id
    tool_turn = {"role": "tool", "content": "18°C, sunny", "name": "get_weather"}
    if call_id is not None:
        tool_turn["tool_call_id"] = call_id
    return [
        {"role": "user", "content": "Weather in Zürich?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        tool_turn,
        {"role": "assistant", "content": "It is 18°C and sunny in Zürich."},
    ]


def with_date(rows):
    return [dict(r, chat_template_kwargs=DATE) for r in rows]


def cases():
    t = {name: template(name) for name in PAIRS.values()}
    out = []
    # Language modeling text: TRL appends the eos token, the tokenizer adds its bos.
    for tok in PAIRS:
        out.append(case(f"text_{tok}", tok, None, TEXTS))
    out.append(case("text_field_content", "qwen2", None, [{"content": r["text"]} for r in TEXTS[:3]],
                    dataset_text_field="content"))
    out.append(case("text_ends_with_eos", "llama3", None, [
        {"text": "Already ended.<|end_of_text|>"}, {"text": "Not ended."},
        {"text": "Ends with another special token<|eot_id|>"}]))
    out.append(case("text_eos_override", "llama3", None, [
        {"text": "Ends with eot."}, {"text": UNI + "<|eot_id|>"}, {"text": "Old eos<|end_of_text|>"}],
        eos_token="<|eot_id|>"))

    # Prompt / completion as plain strings: completion-only loss by default.
    for tok in PAIRS:
        out.append(case(f"prompt_completion_{tok}", tok, None, PROMPT_COMPLETION))
    out.append(case("prompt_completion_full_loss_llama3", "llama3", None, PROMPT_COMPLETION,
                    completion_only_loss=False))
    out.append(case("prompt_completion_full_loss_gemma", "gemma", None, PROMPT_COMPLETION[:2],
                    completion_only_loss=False))
    # completion_only_loss=True on language modeling rows: there is no completion mask, so every token counts.
    out.append(case("text_completion_only_loss_true", "qwen2", None, TEXTS[:2], completion_only_loss=True))

    # Conversational messages: the template renders the whole conversation, no eos is appended.
    for tok, name in PAIRS.items():
        rows = CHAT_NO_SYSTEM if name == "gemma2" else CHAT
        out.append(case(f"messages_{tok}", tok, t[name], with_date(rows) if tok == "llama3" else rows))
    # "tools" is stored as a JSON string, which tokenize_fn parses: as a list of structs Arrow would give every
    # schema the keys of all of them. Tool-call arguments get that treatment: the first row's arguments gain
    # "unit": None, which apply_chat_template keeps (it drops None keys of messages only) and tojson prints as null.
    out.append(case("messages_tools_qwen2", "qwen2", t["qwen2_5"], [
        {"messages": tool_conversation(), "tools": WEATHER_TOOLS},
        {"messages": tool_conversation(arguments={"city": "Zürich", "unit": "C"}), "tools": WEATHER_TOOLS},
        {"messages": messages(("user", "Thanks!"), ("assistant", "You're welcome.")), "tools": WEATHER_TOOLS}]))
    out.append(case("messages_tools_mistral", "mistral", t["mistral"], [
        {"messages": tool_conversation("call00001"), "tools": WEATHER_TOOLS}]))
    # Arrow gives every message the keys of all of them, so plain turns carry "tool_calls": None. The Llama 3
    # template tests `'tool_calls' in message`; it works because apply_chat_template drops a message's None keys.
    out.append(case("messages_tools_llama3", "llama3", t["llama3"], with_date([
        {"messages": tool_conversation(), "tools": WEATHER_TOOLS}])))

    # Conversational prompt / completion: the prompt is rendered with the generation prompt.
    out.append(case("chat_prompt_completion_qwen2", "qwen2", t["qwen2_5"], CHAT_PROMPT_COMPLETION))
    out.append(case("chat_prompt_completion_full_loss_qwen2", "qwen2", t["qwen2_5"], CHAT_PROMPT_COMPLETION,
                    completion_only_loss=False))
    out.append(case("chat_prompt_completion_llama3", "llama3", t["llama3"], with_date(CHAT_PROMPT_COMPLETION)))
    out.append(case("chat_prompt_completion_gemma", "gemma", t["gemma2"], CHAT_PROMPT_COMPLETION_NO_SYSTEM))
    out.append(case("chat_prompt_completion_phi3", "phi3", t["phi3"], CHAT_PROMPT_COMPLETION))
    # The Mistral template writes the system turn into the last turn only when that turn is the user's: the prompt
    # alone keeps it, prompt + completion loses it, and the scored part starts where the two renderings diverge.
    out.append(case("chat_prompt_completion_mistral", "mistral", t["mistral"], CHAT_PROMPT_COMPLETION))

    # Assistant-only loss: labels only inside the template's {% generation %} spans (every token overlapping one).
    out.append(case("assistant_only_qwen2", "qwen2", t["qwen2_5"], MULTI_TURN, assistant_only_loss=True))
    # A token that straddles a span's start is scored: Mistral's "▁Y" holds the space the template writes before
    # {% generation %}; Phi-3's normalizer-prepended "▁" takes the offsets of the span's first character.
    out.append(case("assistant_only_mistral", "mistral", t["mistral"], MULTI_TURN, assistant_only_loss=True))
    out.append(case("assistant_only_gemma", "gemma", t["gemma2"], MULTI_TURN, assistant_only_loss=True))
    out.append(case("assistant_only_phi3", "phi3", t["phi3"], MULTI_TURN, assistant_only_loss=True))
    out.append(case("assistant_only_llama3_generation_template", "llama3", LLAMA3_GENERATION, MULTI_TURN,
                    assistant_only_loss=True))
    # Both masks: completion tokens that are also inside a generation span.
    out.append(case("assistant_only_chat_prompt_completion_qwen2", "qwen2", t["qwen2_5"], CHAT_PROMPT_COMPLETION,
                    assistant_only_loss=True))
    out.append(case("assistant_only_chat_prompt_completion_full_loss_phi3", "phi3", t["phi3"],
                    CHAT_PROMPT_COMPLETION, assistant_only_loss=True, completion_only_loss=False))

    # Truncation keeps the start; rows left with no scored token are dropped.
    out.append(case("truncate_text_llama3", "llama3", None, TEXTS, max_length=12))
    out.append(case("truncate_prompt_completion_drop_mistral", "mistral", None, [
        {"prompt": "Short:", "completion": " yes"},
        {"prompt": "A prompt long enough to fill every one of the twelve positions", "completion": " lost"},
        {"prompt": "Cut inside:", "completion": " the completion is longer than what is left"},
        {"prompt": UNI * 3, "completion": " dropped too"}], max_length=12))
    out.append(case("truncate_assistant_only_drop_qwen2", "qwen2", t["qwen2_5"], [
        {"messages": messages(("user", "Hi"), ("assistant", "Hello"))},
        {"messages": messages(("user", "A question long enough to push the answer past the limit"),
                              ("assistant", "Too late."))},
        MULTI_TURN[1]], max_length=40, assistant_only_loss=True))
    out.append(case("truncate_full_loss_keeps_prompt_only_rows", "mistral", None, [
        {"prompt": "A prompt long enough to fill every one of the twelve positions", "completion": " lost"}],
        max_length=12, completion_only_loss=False))

    # Packing: no truncation first; bfd cuts each sequence to max_length, bfd_split re-queues the overflow, wrapped
    # cuts the concatenation.
    packed_texts = TEXTS + [{"text": "A longer document that will not fit in one packed row of thirty-two tokens, "
                                     "so its end is cut or moved."}, {"text": "Tail."}]
    for strategy in ("bfd", "bfd_split", "wrapped"):
        out.append(case(f"pack_{strategy}_text_qwen2", "qwen2", None, packed_texts, max_length=32, packing=True,
                        packing_strategy=strategy))
    out.append(case("pack_bfd_prompt_completion_llama3", "llama3", None, PROMPT_COMPLETION, max_length=32,
                    packing=True))
    out.append(case("pack_wrapped_prompt_completion_llama3", "llama3", None, PROMPT_COMPLETION, max_length=32,
                    packing=True, packing_strategy="wrapped"))
    out.append(case("pack_bfd_assistant_only_gemma", "gemma", t["gemma2"], MULTI_TURN + CHAT_NO_SYSTEM[:1],
                    max_length=32, packing=True, assistant_only_loss=True))
    out.append(case("pack_bfd_split_messages_phi3", "phi3", t["phi3"], CHAT, max_length=24, packing=True,
                    packing_strategy="bfd_split"))

    # Errors.
    # __init__ swaps in TRL's training template when the template has no generation marks; it knows only the
    # templates it ships, so the fixture Llama 3 template is refused before any row is tokenized.
    out.append(case("error_assistant_only_no_generation_marks", "llama3", t["llama3"], with_date(CHAT),
                    assistant_only_loss=True, expect_error=True))
    # A template with generation marks, and a row without an assistant turn: the mask has no 1.
    out.append(case("error_assistant_only_no_assistant_turn", "qwen2", t["qwen2_5"], [
        CHAT[0], {"messages": messages(("system", "Alone."), ("user", "Anyone?"))}], assistant_only_loss=True,
        expect_error=True))
    out.append(case("error_assistant_only_not_conversational", "qwen2", t["qwen2_5"], TEXTS[:2],
                    assistant_only_loss=True, expect_error=True))
    # Dataset.from_list keeps the first row's keys: the second row loses "text" and gets completion None.
    out.append(case("error_mixed_formats", "qwen2", None, [
        {"prompt": "The sky is", "completion": " blue."}, {"text": "A text row."}], normalize=False,
        expect_error=True))
    return out


def dump(obj, indent=0):
    """json with one item a line, except that lists of numbers and dicts of scalars stay on one line."""
    pad = " " * (indent + 1)
    scalar = (str, int, float, bool, type(None))
    if isinstance(obj, dict) and obj and not all(isinstance(v, scalar) for v in obj.values()):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {dump(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(obj, list) and obj and not all(isinstance(x, (int, float)) for x in obj):
        return "[\n" + ",\n".join(pad + dump(v, indent + 1) for v in obj) + "\n" + " " * indent + "]"
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def main():
    datasets.disable_progress_bars()
    datasets.disable_caching()
    transformers.logging.set_verbosity_error()
    logging.getLogger("trl").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    doc = {"generator": f"trl {trl.__version__}, transformers {transformers.__version__}, "
                        f"datasets {datasets.__version__}",
           "cases": cases()}
    names = [c["name"] for c in doc["cases"]]
    assert len(names) == len(set(names)), "case names must be unique"
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(dump(doc))
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)}: {len(names)} cases, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    sys.exit(main())

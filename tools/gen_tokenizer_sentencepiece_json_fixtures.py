#!/usr/bin/env python3
"""Makes the SentencePiece-style tokenizer.json fixtures in tests/fixtures/tokenizer/ with HF
`tokenizers`: BPE with byte fallback as Llama 2, Mistral, Gemma and Phi-3 ship it.

The real files cannot be fetched here, so each vocabulary is a small SentencePiece BPE (byte
fallback, split digits, no whitespace folding) trained on Debian's `fortunes` with the
`sentencepiece` library and converted by transformers' SpmConverter; the tokenizer.json around it
is written in each family's shipped style:
- llama2/: normalizer Sequence [Prepend "▁", Replace " " -> "▁"], no pre-tokenizer, decoder
  Sequence [Replace "▁" -> " ", ByteFallback, Fuse, Strip(" ", 1, 0)], BPE with byte_fallback,
  fuse_unk and unk_token, post-processor TemplateProcessing "<s> $A" (transformers' legacy
  LlamaConverter, as Llama-2-7b-hf's file has it);
- mistral/: no normalizer, Metaspace pre-tokenizer (prepend_scheme "first", split false), a
  Metaspace decoder, [INST] and [/INST] special tokens (the non-legacy conversion, Mistral v0.3);
- gemma/: normalizer Replace " " -> "▁", Split " " MergedWithPrevious, decoder Sequence [Replace,
  ByteFallback, Fuse], no dummy prefix, <pad> <eos> <bos> <unk> as ids 0..3, <start_of_turn>
  and <end_of_turn> (GemmaConverter);
- phi3/: Llama 2's pipeline with Phi-3's added tokens: <|endoftext|>, <|user|>, <|assistant|>,
  <|end|> (special, rstrip as Phi-3 has them) and a normal token that is normalized;
- sentencepiece_json_reference.json: the texts (Unicode, emoji and CJK that need byte fallback,
  runs of spaces at the start, inside and at the end, newlines, added tokens inside text), lines
  of the corpus and random strings of such pieces; per family the ids `tokenizers` gives with
  and without special tokens and its decodings; and per variant (a family's file with one
  component changed: Metaspace prepend_scheme and split, a post-processor adding EOS, no
  decoder) the changed fields and the same on the hand-written texts and 40 random ones.
Needs the PyPI packages `tokenizers`, `transformers`, `sentencepiece` and `protobuf`. Run from the repository
root: python3 tools/gen_tokenizer_sentencepiece_json_fixtures.py
"""
import copy
import json
import os
import random
import tempfile

import sentencepiece as spm
from tokenizers import Tokenizer

from gen_tokenizer_regex_fixtures import corpus_lines

OUT = "tests/fixtures/tokenizer"

TEXTS = [
    "Hello world! It's 3.14159 o'clock; we'll see -- they're 'quoted' & don't.",
    "Hello",
    " Hello",
    "  Hello  world  ",
    "Hello world   ",
    "",
    " ",
    "   ",
    "\n",
    "lines\n\n\nthree\r\nwindows\r\n\r\n  \n  x\n",
    "\ttabs\t\there\t \t\n\t",
    "    indented\n\n\n\tcode();  // x += 1;\n}\n",
    "1 12 123 1234 12345 3.14159 1,000,000 $5.99 50% 2024-01-01",
    "café naïve über Grüße Ελληνικά русский язык",
    "中文字符和日本語のテキスト，한국어 텍스트。",
    "emoji 🙂👍🏽 👨‍👩‍👧 🇫🇷 1️⃣ ✨!!",
    "e\u0301 a\u0308 \u212b \ufb01 a\u00a0b\u3000c\u2003d \u200bzero",
    "▁already▁metaspace▁ ▁▁x",
    "<s>Hello</s> <s> x</s>",
    "<unk> <pad> <bos>Hi<eos> <mask>",
    "[INST] What is 2+2? [/INST] 4</s>[INST]again[/INST]",
    "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\n",
    "<|user|>\nHello<|end|>\n<|assistant|>   Hi there<|end|><|endoftext|>",
    "a<|user|>b <|assistant|>  c <|end|> topic: x topic:y",
    "<0x41> <0xE4> <s",
    "'s",
]

PIECES = (list("aZé ßñΩж中日한0123456789 \t\n\r'!?.,;:-_()[]<>\"/\\@#$%&*") +
          ["  ", "   ", "\r\n", "\n\n", "▁", "▁▁", "\u0301", "\u00a0", "\u3000", "\u200b",
           "\U0001F642", "\U0001F44D\U0001F3FD", "\u05e9", "\u0645", "<s>", "</s>", "<unk>",
           "[INST]", "[/INST]", "<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>",
           "<|user|>", "<|assistant|>", "<|end|>", "<|endoftext|>", " topic:", "topic:",
           "Hello", " world", "the", "<0x41>", "<|", "|>"])


def random_texts(count):
    rng = random.Random(36)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 20))) for _ in range(count)]


def train_spm(lines, directory, **options):
    corpus = os.path.join(directory, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    prefix = os.path.join(directory, "gemma" if options else "llama")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, model_type="bpe", vocab_size=700, byte_fallback=True,
        character_coverage=0.9995, normalization_rule_name="identity",
        remove_extra_whitespaces=False, split_digits=True, minloglevel=2, **options)
    return prefix + ".model"


def converted_model(model_file):
    """model.vocab and model.merges as transformers' SpmConverter builds them (merges ranked by
    the pieces' scores)."""
    from transformers.convert_slow_tokenizer import SentencePieceExtractor, SpmConverter
    extractor = SentencePieceExtractor(model_file)
    vocab = extractor.extract(None)["vocab"]
    tok = SpmConverter.build_tokenizer_from_spm_proto(extractor.proto, vocab)
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], model["merges"]


def added(id_, content, special=True, normalized=False, rstrip=False):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False,
            "rstrip": rstrip, "normalized": normalized, "special": special}


def template(vocab, first, last=None):
    single = [{"SpecialToken": {"id": first, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    specials = {first: {"id": first, "ids": [vocab[first]], "tokens": [first]}}
    if last is not None:
        single.append({"SpecialToken": {"id": last, "type_id": 0}})
        specials[last] = {"id": last, "ids": [vocab[last]], "tokens": [last]}
    return {"type": "TemplateProcessing", "single": single,
            "pair": single + [{"Sequence": {"id": "B", "type_id": 1}}], "special_tokens": specials}


def bpe(vocab, merges, unk):
    return {"type": "BPE", "dropout": None, "unk_token": unk, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
            "ignore_merges": False, "vocab": vocab, "merges": merges}


REPLACE_DECODER = {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}
LEGACY_NORMALIZER = {"type": "Sequence", "normalizers": [
    {"type": "Prepend", "prepend": "▁"},
    {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}
LEGACY_DECODER = {"type": "Sequence", "decoders": [
    REPLACE_DECODER, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def root(added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
            "normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
            "post_processor": post_processor, "decoder": decoder, "model": model}


def families(lines, directory):
    llama_vocab, llama_merges = converted_model(train_spm(lines, directory))
    gemma_vocab, gemma_merges = converted_model(
        train_spm(lines, directory, pad_id=0, eos_id=1, bos_id=2, unk_id=3, add_dummy_prefix=False,
                  pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>"))
    specials = [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")]
    out = {}
    out["llama2"] = (root(specials, LEGACY_NORMALIZER, None, template(llama_vocab, "<s>"),
                          LEGACY_DECODER, bpe(llama_vocab, llama_merges, "<unk>")),
                     {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    n = len(llama_vocab)
    mistral = specials + [added(n, "[INST]"), added(n + 1, "[/INST]")]
    metaspace = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                 "split": False}
    out["mistral"] = (root(mistral, None, metaspace, template(llama_vocab, "<s>"),
                           dict(metaspace), bpe(llama_vocab, llama_merges, "<unk>")),
                      {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"})
    n = len(gemma_vocab)
    gemma = [added(0, "<pad>"), added(1, "<eos>"), added(2, "<bos>"), added(3, "<unk>"),
             added(n, "<start_of_turn>"), added(n + 1, "<end_of_turn>")]
    out["gemma"] = (root(gemma, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
                         {"type": "Split", "pattern": {"String": " "},
                          "behavior": "MergedWithPrevious", "invert": False},
                         template(gemma_vocab, "<bos>"),
                         {"type": "Sequence", "decoders": [REPLACE_DECODER, {"type": "ByteFallback"},
                                                           {"type": "Fuse"}]},
                         bpe(gemma_vocab, gemma_merges, "<unk>")),
                    {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>"})
    n = len(llama_vocab)
    phi3 = specials + [added(n, "<|endoftext|>"), added(n + 1, "<|assistant|>", rstrip=True),
                       added(n + 2, "<|end|>", rstrip=True), added(n + 3, "<|user|>", rstrip=True),
                       added(n + 4, "topic:", special=False, normalized=True)]
    out["phi3"] = (root(phi3, LEGACY_NORMALIZER, None, template(llama_vocab, "<s>"),
                        LEGACY_DECODER, bpe(llama_vocab, llama_merges, "<unk>")),
                   {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"})
    return out


def variants(fams):
    """(name, family, the family's file with one component changed)."""
    out = []
    for scheme in ("always", "never", "first"):
        for split in (True, False):
            if scheme == "first" and not split:
                continue  # the family itself
            v = copy.deepcopy(fams["mistral"][0])
            v["pre_tokenizer"].update(prepend_scheme=scheme, split=split)
            v["decoder"].update(prepend_scheme=scheme, split=split)
            out.append((f"mistral_metaspace_{scheme}_{'split' if split else 'whole'}", v))
    v = copy.deepcopy(fams["llama2"][0])
    v["post_processor"] = template(v["model"]["vocab"], "<s>", "</s>")
    out.append(("llama2_bos_eos", v))
    v = copy.deepcopy(fams["llama2"][0])
    v["decoder"] = None
    v["post_processor"] = None
    out.append(("llama2_no_decoder", v))
    v = copy.deepcopy(fams["gemma"][0])
    v["pre_tokenizer"] = None
    out.append(("gemma_no_pre_tokenizer", v))
    return out


def tokenizer_json_changes(base, changed):
    """The top-level fields of `changed` that differ from `base`: the test applies them to the
    family's file."""
    return {key: value for key, value in changed.items() if base[key] != value}


def results(tok, texts):
    ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    return {"vocab_size": tok.get_vocab_size(with_added_tokens=True), "ids": ids,
            "ids_with_special_tokens": [tok.encode(t).ids for t in texts],
            "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids]}


def main():
    lines = [line for line in corpus_lines() if line.strip() and line != "%"]
    texts = TEXTS + lines[::len(lines) // 60][:60] + random_texts(120)
    # The variants on the hand-written texts and some random ones (a smaller file).
    variant_texts = [i for i, t in enumerate(texts) if i < len(TEXTS) or i >= len(texts) - 40]
    reference = {"texts": texts}
    with tempfile.TemporaryDirectory() as directory:
        fams = families(lines, directory)
    for name, (tokenizer_json, config) in fams.items():
        path = os.path.join(OUT, name)
        os.makedirs(path, exist_ok=True)
        text = json.dumps(tokenizer_json, ensure_ascii=False, separators=(",", ":"))
        with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(text)
        with open(os.path.join(path, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        reference[name] = results(Tokenizer.from_file(os.path.join(path, "tokenizer.json")), texts)
        print(f"{name}: tokenizer.json {len(text.encode())} bytes")
    reference["variants"] = {}
    for name, tokenizer_json in variants(fams):
        result = results(Tokenizer.from_str(json.dumps(tokenizer_json)),
                         [texts[i] for i in variant_texts])
        reference["variants"][name] = {"texts": variant_texts, "tokenizer_json": tokenizer_json_changes(
            fams[name.split("_")[0]][0], tokenizer_json), **result}
    with open(os.path.join(OUT, "sentencepiece_json_reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Makes the Llama 3 and Qwen2 tokenizer fixtures in tests/fixtures/tokenizer/ with HF `tokenizers`.

The real tokenizers cannot be fetched here, so each is a small byte-level BPE (a few hundred
merges) trained on Debian's `fortunes` with the configuration the family ships, as transformers'
TikTokenConverter (Llama 3) and Qwen2Tokenizer (Qwen2 / 2.5 / 3) build it:
- llama3/: Split (Isolated) on Llama 3's regex, ByteLevel without regex, BPE with ignore_merges,
  special tokens <|begin_of_text|>, <|end_of_text|>, <|eot_id|>, a post-processor that puts
  <|begin_of_text|> first (Sequence of ByteLevel and TemplateProcessing, as Meta's file has it);
- qwen2/: NFC normaliser, Split on Qwen2's regex (single digits), ByteLevel, special tokens
  <|endoftext|>, <|im_start|>, <|im_end|> (not normalised), a ByteLevel post-processor; its
  merges are written as "a b" strings, as older tokenizer.json files have them;
- regex_reference.json: the texts (Unicode, digit runs, whitespace runs, contractions, special
  tokens inside text), lines of the corpus and random strings of such pieces, and, per family, the ids `tokenizers` gives with and without special
  tokens and its decodings.
transformers' AutoTokenizer on each directory (TokenizersBackend for Llama 3, Qwen2Tokenizer) is
checked to give the same ids, with and without special tokens, and the same eos_token_id;
add_bos_token in tokenizer_config.json does not change its ids where tokenizer.json has a
post-processor (transformers 5.25), so headroom follows the post-processor alone.
Run from the repository root with the python that has `tokenizers`:
python3 tools/gen_tokenizer_regex_fixtures.py
"""
import glob
import json
import os
import random

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

OUT = "tests/fixtures/tokenizer"
FORTUNES = "/usr/share/games/fortunes"

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

TEXTS = [
    "Hello world! It's 3.14159 o'clock; we'll see -- they're 'quoted' & don't, I'd, I've.",
    "IT'S, WE'LL, THEY'RE, I'VE, I'M, I'D, DON'T; It'S a 'Ll 'Re 'mOK 'x ''s",
    "1 12 123 1234 12345 1234567 3.14159 1,000,000 $5.99 50% 2024-01-01 x86_64 v1.2.3",
    "٣٤٥ ²³ ½ Ⅻ ①② ４５６ 12ab ab12",
    "中文字符和日本語のテキスト，한국어 텍스트。",
    "café naïve über Grüße Ελληνικά русский язык",
    "e\u0301 a\u0308 o\u0302\u0323 n\u0303 \u212b \u0041\u030a \ufb01 \u1e9b\u0323",
    "\u1100\u1161\u11a8 \uac00\u11a8 한\u0301",
    "مرحبا بالعالم שלום עולם (RTL) ‏mixed‎",
    "emoji 🙂👍🏽 👨‍👩‍👧 🇫🇷 1️⃣ ✨!!",
    "  two  spaces,   three   .  trailing   ",
    "\ttabs\t\there\t \t\n\t",
    "lines\n\n\nthree\r\nwindows\r\n\r\n  \n  x\n",
    "    indented\n\n\n\tcode();  // x += 1;\n}\n",
    "a\u00a0b\u3000c\u2003d \u200bzero-width\u2028sep",
    "!!abc ?!x ...hello .a,b;c (x) [y] {z} <tag> \"q\" 'q'",
    "punct at end!!!\n\n",
    "<|begin_of_text|>Hello<|eot_id|> <|end_of_text|>\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>",
    "x<|endoftext|>y <|endoftext|> <|endoftext| <|im_start|",
    "",
    " ",
    "\n",
    "'s",
]


# Pieces of the random texts: every class the regexes tell apart, runs of each kind of space,
# contractions in each case, marks of several combining classes, Hangul jamo, decompositions that
# NFC composes, reorders or excludes, and special tokens and their fragments.
PIECES = (list("aZé ßñΩж中日한ㄱ0123456789 \t\n\r'!?.,;:-_()[]<>\"/\\@#$%&*") +
          ["  ", "\r\n", "\n\n", "'s", "'S", "'ll", "'LL", "'Re", "'ſ", "'d", "'M", "'x",
           "\u0300", "\u0301", "\u0302", "\u0308", "\u0323", "\u0327", "\u031b", "\u0345",
           "\u05b0", "\u093c", "\u0958", "\u212b", "\u2126", "\u1e9b", "\ufb01", "\u1100",
           "\u1161", "\u11a8", "\uac00", "\u0663", "\u00b2", "\u00bd", "\u216b", "\uff14",
           "\u00a0", "\u3000", "\u2003", "\u200b", "\u200d", "\U0001F642", "\U0001F44D\U0001F3FD",
           "\u05e9", "\u0645", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
           "<|eot_id|>", "<|", "|>", "1234567", "   ", "\t\t"])


def random_texts(count):
    rng = random.Random(36)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 30))) for _ in range(count)]


def corpus_lines():
    lines = []
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        if os.path.isfile(path) and not path.endswith((".dat", ".u8")):
            with open(path, encoding="utf-8") as f:
                lines.extend(line.rstrip("\n") for line in f)
    return lines


def train(lines, pattern, specials, normalizer, vocab_size):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


def save(tok, name, config, string_merges=False):
    directory = os.path.join(OUT, name)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "tokenizer.json")
    tok.save(path, pretty=False)
    if string_merges:
        with open(path, encoding="utf-8") as f:
            root = json.load(f)
        root["model"]["merges"] = [" ".join(m) for m in root["model"]["merges"]]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(root, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return Tokenizer.from_file(path)


def check_transformers(reference):
    from transformers import AutoTokenizer
    for name, eos in (("llama3", "<|end_of_text|>"), ("qwen2", "<|endoftext|>")):
        tok = AutoTokenizer.from_pretrained(os.path.join(OUT, name))
        ref = reference[name]
        for i, text in enumerate(reference["texts"]):
            assert tok(text, add_special_tokens=False)["input_ids"] == ref["ids"][i], (name, i)
            assert tok(text)["input_ids"] == ref["ids_with_special_tokens"][i], (name, i)
        assert tok.eos_token_id == tok.convert_tokens_to_ids(eos), name


def main():
    lines = [line for line in corpus_lines() if line.strip() and line != "%"]
    texts = TEXTS + lines[::len(lines) // 100][:100] + random_texts(200)
    bos = "<|begin_of_text|>"
    llama = train(lines, LLAMA3_PATTERN, [bos, "<|end_of_text|>", "<|eot_id|>"], None, 700)
    llama.model.ignore_merges = True
    bos_id = llama.token_to_id(bos)
    llama.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos}:0 $A:0", pair=f"{bos}:0 $A:0 {bos}:1 $B:1",
                                      special_tokens=[(bos, bos_id)]),
    ])
    llama = save(llama, "llama3", {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos,
                                   "eos_token": "<|end_of_text|>"})
    qwen = train(lines, QWEN2_PATTERN, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                 normalizers.NFC(), 700)
    qwen.post_processor = processors.ByteLevel(trim_offsets=False)
    qwen = save(qwen, "qwen2", {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None,
                                "eos_token": "<|endoftext|>"}, string_merges=True)
    reference = {"texts": texts}
    for name, tok in (("llama3", llama), ("qwen2", qwen)):
        ids = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        reference[name] = {
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "ids": ids,
            "ids_with_special_tokens": [tok.encode(t).ids for t in texts],
            "decoded": [tok.decode(i, skip_special_tokens=False) for i in ids],
        }
    check_transformers(reference)
    with open(os.path.join(OUT, "regex_reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    for name in ("llama3", "qwen2"):
        size = os.path.getsize(os.path.join(OUT, name, "tokenizer.json"))
        print(f"{name}: tokenizer.json {size} bytes")


if __name__ == "__main__":
    main()

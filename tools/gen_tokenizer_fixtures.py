#!/usr/bin/env python3
"""Makes the tokenizer fixtures in tests/fixtures/tokenizer/ with the reference libraries.

- gpt2_bpe/: a byte-level BPE trained with HF `tokenizers` in GPT-2's configuration (ByteLevel
  pre-tokenizer without prefix space, ByteLevel decoder, <|endoftext|>), saved as tokenizer.json
  and as vocab.json + merges.txt;
- sentencepiece/: a SentencePiece BPE in Llama's configuration (identity normalisation, dummy
  prefix, byte fallback, split digits, unk/bos/eos = 0/1/2), saved as tokenizer.model;
- reference.json: test texts and the ids and decodings the libraries give for them;
- gpt2_bpe_edges/: a hand-made byte-level BPE whose tokenizer.json lists a merge pair twice (HF
  keeps the last rank) and has single_word added tokens, with edges_reference.json: the ids HF
  gives for texts that put those tokens next to word and non-word characters (², Ⅻ, ٣, marks).

Both models are trained on Debian's `fortunes` package (/usr/share/games/fortunes). Needs the PyPI
packages `tokenizers` and `sentencepiece` (the pyenv python3, not Debian's /usr/bin/python3).
Run from the repository root: python3 tools/gen_tokenizer_fixtures.py
(`python3 tools/gen_tokenizer_fixtures.py edges` makes only gpt2_bpe_edges/, with `tokenizers`.)
"""
import glob
import json
import os
import tempfile

import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

OUT = "tests/fixtures/tokenizer"
FORTUNES = "/usr/share/games/fortunes"
EOT = "<|endoftext|>"

# Contractions, numbers, punctuation, runs of spaces, tabs, CR/LF, non-ASCII letters and numbers,
# emoji, and the special token inside text.
TEST_TEXTS = [
    "Hello world! It's 3.14159 o'clock; we'll see -- they're 'quoted' & don't, I'd, I've, I'M.\n"
    "\nTabs\there,  two  spaces,   three.\r\nNon-ASCII: café, naïve, über, Grüße, 中文字符, 日本語,"
    " Ελληνικά, русский, عربي, emoji 🙂👍🏽 and ½ Ⅻ ٣.\n" + EOT + "Next document: 2024-01-01."
    + EOT + "  trailing   \n",
    "Hello",
    " Hello  world ",
    "",
    "    indented\n\n\n\tcode();  // x += 1;\n",
    "?'s ''' 's 'S 1,000,000 $5.99 50% a\u00a0b\u3000c e\u0301",
    EOT,
    "a" + EOT + EOT + "b <|endoftext| <|endoftext|>>",
    "ÀÁÂÃÄÅ ąęćłńśźż ğış ñ ß 1️⃣ ℕ ⅓",
]


def corpus_files():
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        if os.path.isfile(path) and not path.endswith((".dat", ".u8")):
            yield path


def corpus_lines():
    lines = []
    for path in corpus_files():
        with open(path, encoding="utf-8") as f:
            lines.extend(line.rstrip("\n") for line in f)
    return lines


def sample_lines(lines, count):
    # Every k-th line that is neither empty nor a fortune separator, in order.
    usable = [line for line in lines if line.strip() and line != "%"]
    step = len(usable) // count
    return usable[::step][:count]


def train_bpe(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    directory = os.path.join(OUT, "gpt2_bpe")
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"), pretty=False)
    tok.model.save(directory)  # vocab.json, merges.txt
    return Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))


def train_sentencepiece(lines):
    import sentencepiece as spm
    directory = os.path.join(OUT, "sentencepiece")
    os.makedirs(directory, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "corpus.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(line for line in lines if line.strip()) + "\n")
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=os.path.join(tmp, "m"), model_type="bpe", vocab_size=1000,
            character_coverage=1.0, byte_fallback=True, split_digits=True,
            normalization_rule_name="identity", remove_extra_whitespaces=False,
            add_dummy_prefix=True, allow_whitespace_only_pieces=True, unk_id=0, bos_id=1,
            eos_id=2, pad_id=-1, num_threads=1, minloglevel=2)
        with open(os.path.join(tmp, "m.model"), "rb") as src:
            model = src.read()
    with open(os.path.join(directory, "tokenizer.model"), "wb") as dst:
        dst.write(model)
    return spm.SentencePieceProcessor(model_proto=model)


# Characters next to a single_word token: Rust regex's \w (HF's word test) is Alphabetic, marks,
# decimal digits (Nd), connector punctuation and joiners; other numbers such as ² or ½ are not.
EDGE_NEIGHBOURS = ["", " ", "-", "_", "a", "1", "\u00b2", "\u00b9", "\u00bd", "\u2167", "\u0663",
                   "\u00e9", "e\u0301", "\u203f", "\u200d", "\u24d0", "\U0001F170", "\u2460",
                   "\u3000", "!"]


def edge_cases():
    """A BPE with a merge pair listed twice and single_word added tokens, and HF's ids."""
    vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "\u0120": 5, "-": 6, "_": 7, "1": 8}
    # "b c" first at rank 0, again at rank 2: HF keeps rank 2, so "abc" is "ab" + "c".
    merges = [("b", "c"), ("a", "b"), ("b", "c")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken("<w>", single_word=True, special=True)])
    tok.add_tokens([AddedToken("cab", single_word=True, normalized=False)])
    directory = os.path.join(OUT, "gpt2_bpe_edges")
    os.makedirs(directory, exist_ok=True)
    tok.save(os.path.join(directory, "tokenizer.json"), pretty=True)
    tok = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
    texts = ["abc", "babc", "abcbc", "ab bc"]
    for before in EDGE_NEIGHBOURS:
        for after in ["", " ", "\u00b2", "a", "\u0663"] if before == "" else [""]:
            texts.append(before + "<w>" + after)
            texts.append(before + "cab" + after)
    for after in EDGE_NEIGHBOURS:
        texts.append("<w>" + after)
        texts.append("cab" + after)
    texts = list(dict.fromkeys(texts))
    reference = {"texts": texts, "ids": [tok.encode(t, add_special_tokens=False).ids for t in texts]}
    with open(os.path.join(OUT, "edges_reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"{len(texts)} edge texts")


def main():
    if sys.argv[1:] == ["edges"]:
        edge_cases()
        return
    edge_cases()
    lines = corpus_lines()
    bpe = train_bpe(lines)
    sp = train_sentencepiece(lines)
    texts = TEST_TEXTS + sample_lines(lines, 300)
    bpe_ids = [bpe.encode(t, add_special_tokens=False).ids for t in texts]
    sp_ids = [sp.encode(t) for t in texts]
    reference = {
        "texts": texts,
        "gpt2_bpe": {
            "vocab_size": bpe.get_vocab_size(with_added_tokens=True),
            "eos_token_id": bpe.token_to_id(EOT),
            "ids": bpe_ids,
            "decoded": [bpe.decode(ids, skip_special_tokens=False) for ids in bpe_ids],
            # Single tokens of the first text: cut characters decode to U+FFFD.
            "decoded_each": [bpe.decode([i], skip_special_tokens=False) for i in bpe_ids[0]],
        },
        "sentencepiece": {
            "vocab_size": sp.get_piece_size(),
            "eos_token_id": sp.eos_id(),
            "ids": sp_ids,
            "decoded": [sp.decode(ids) for ids in sp_ids],
        },
    }
    with open(os.path.join(OUT, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(reference, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(OUT) for n in ns)
    print(f"{len(texts)} texts, fixtures {total} bytes in {OUT}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The HF tokenizers side of bench/tokenizer_bench: encodes the same fortunes one document at a
time on one thread (best of three passes, the first fills the BPE cache) and prints
"RESULT seconds=S tokens=N digest=HEX", the digest being FNV-1a 64 over all ids in order.

Usage: python3 bench/tokenizer_bench_peer.py --model DIR --corpus DIR   (needs PyPI `tokenizers`)
"""
import argparse
import os
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"


def documents(corpus):
    docs = []
    for name in sorted(os.listdir(corpus)):
        path = os.path.join(corpus, name)
        if os.path.isfile(path) and not name.endswith((".dat", ".u8")):
            with open(path, "rb") as f:
                docs.extend(f.read().decode("utf-8").split("\n%\n"))
    return docs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--corpus", required=True)
    args = parser.parse_args()
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    docs = documents(args.corpus)
    best = float("inf")
    for _ in range(4):
        start = time.perf_counter()
        ids = [tok.encode(d, add_special_tokens=False).ids for d in docs]
        best = min(best, time.perf_counter() - start)
    digest, tokens = 0xCBF29CE484222325, 0
    for doc in ids:
        tokens += len(doc)
        for i in doc:
            digest = ((digest ^ i) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    print(f"RESULT seconds={best} tokens={tokens} digest={digest:016x}")


if __name__ == "__main__":
    main()

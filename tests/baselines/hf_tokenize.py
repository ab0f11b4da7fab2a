"""Hugging Face tokenizers' throughput: the baseline of experiments/bench_tokenize.lua.

Not part of dpprof (nothing in the product, its tests or CI runs Python). Encodes the records of a
JSONL file's `text` field `--rounds` times with `Tokenizer.encode_batch` (add_special_tokens=False)
and prints one JSON line a run: {"tokenizer", "threads", "tokens", "seconds", "version"}, once with
RAYON_NUM_THREADS=1 (one thread) and once with the default pool (every core), each in its own
process (Rayon's pool is sized once). Run it as the bench does:

    python3 -m venv /tmp/venv-tok && /tmp/venv-tok/bin/pip install tokenizers
    /tmp/venv-tok/bin/python tests/baselines/hf_tokenize.py --corpus experiments/data/kjv_genesis.jsonl \
        --tokenizer tests/fixtures/tokenizer/llama3/tokenizer.json --rounds 5
"""
import argparse
import json
import os
import subprocess
import sys
import time


def run_once(corpus, tokenizer, rounds):
    from tokenizers import Tokenizer, __version__
    lines = [json.loads(l)["text"] for l in open(corpus, encoding="utf-8") if l.strip()]
    tok = Tokenizer.from_file(tokenizer)
    tok.encode_batch(lines[:100], add_special_tokens=False)  # warm the pool and the cache path
    n = 0
    t0 = time.perf_counter()
    for _ in range(rounds):
        for e in tok.encode_batch(lines, add_special_tokens=False):
            n += len(e.ids)
    dt = time.perf_counter() - t0
    threads = os.environ.get("RAYON_NUM_THREADS", str(os.cpu_count()))
    print(json.dumps({"tokenizer": tokenizer, "threads": int(threads), "tokens": n, "seconds": dt,
                      "version": __version__}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--corpus", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--child", action="store_true")
    a = p.parse_args()
    if a.child:
        run_once(a.corpus, a.tokenizer, a.rounds)
        return
    for threads in ("1", None):
        env = dict(os.environ)
        if threads:
            env["RAYON_NUM_THREADS"] = threads
        else:
            env.pop("RAYON_NUM_THREADS", None)
        out = subprocess.run([sys.executable, __file__, "--child", "--corpus", a.corpus, "--tokenizer", a.tokenizer,
                              "--rounds", str(a.rounds)], env=env, check=True, capture_output=True, text=True)
        sys.stdout.write(out.stdout)


if __name__ == "__main__":
    main()

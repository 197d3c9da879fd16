"""Benchmark of the tokenize stage's encode function against a raw tokenizer call.

``adloco.data.tokenizer.encode_documents`` (what ``adloco tokenize`` runs in
each worker process: encode, append EOS, flatten into a numpy array) is timed
against the plain ``tokenizer(batch)`` of transformers on the same documents in
the same run, one core each (``TOKENIZERS_PARALLELISM=false``), best CPU time
of a few interleaved repeats. The goal is a ratio >= 0.9: the stage's
bookkeeping costs at most 10 % of tokenization. Text: the first documents of
the offline Wikipedia corpus; tokenizers: the default BPE (trained here) and
mistral-v1.

    .venv/bin/python benchmarks/bench_tokenize.py [--documents 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one core for both sides, before any import


def cpu_time_s(fn) -> float:
    # Process CPU time: both sides run on one thread, and on a shared machine
    # wall time would mostly measure the neighbours.
    start = time.process_time()
    fn()
    return time.process_time() - start


def compare(name: str, tokenizer, folder: Path, texts: list[str], repeats: int) -> float:
    from adloco.data import tokenizer as tok

    backend = tok.load_backend(folder)
    eos = tokenizer.eos_token_id
    dtype = tok.token_dtype(len(tokenizer))
    flat, _ = tok.encode_documents(backend, texts, eos, dtype)
    raw_ids = tokenizer(texts)["input_ids"]
    tokens = sum(map(len, raw_ids))
    assert flat.size == tokens + len(texts), "stage and raw tokenizer disagree"
    raw_s = stage_s = float("inf")
    for _ in range(repeats):  # interleaved, so both sides see the same machine load
        raw_s = min(raw_s, cpu_time_s(lambda: tokenizer(texts)["input_ids"]))
        stage_s = min(stage_s, cpu_time_s(lambda: tok.encode_documents(backend, texts, eos, dtype)))
    raw_rate, stage_rate = tokens / raw_s, tokens / stage_s
    print(
        f"{name:<11} vocab {len(tokenizer):>6}  {tokens:>9} tokens  "
        f"raw tokenizer(batch) {raw_rate / 1e3:8.0f} k tok/s  "
        f"stage encode_documents {stage_rate / 1e3:8.0f} k tok/s  "
        f"ratio {stage_rate / raw_rate:5.2f}"
    )
    return stage_rate / raw_rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=2000, help="documents encoded per pass")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per side")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from adloco.data import tokenizer as tok
    from adloco.data.corpus import wiki_records

    texts = [r["text"] for r in wiki_records(max_documents=args.documents)]
    print(f"{len(texts)} documents, {sum(map(len, texts)) / 1e6:.2f} M characters, one core each")
    ratios = {}
    with tempfile.TemporaryDirectory() as scratch:
        bpe_dir = tok.save_tokenizer(tok.train_bpe(texts, 4096), Path(scratch) / "bpe")
        bpe = AutoTokenizer.from_pretrained(bpe_dir)
        ratios["bpe"] = compare("bpe", bpe, bpe_dir, texts, args.repeats)
        try:
            mistral = tok.load_mistral_v1(scratch)
        except (FileNotFoundError, ValueError) as exc:
            print(f"mistral-v1  skipped: {exc}")
        else:
            mistral_dir = tok.save_tokenizer(mistral, Path(scratch) / "mistral-saved")
            ratios["mistral-v1"] = compare("mistral-v1", mistral, mistral_dir, texts, args.repeats)
    worst = min(ratios.values())
    print(f"worst ratio {worst:.2f} (goal >= 0.90): {'ok' if worst >= 0.9 else 'BELOW GOAL'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

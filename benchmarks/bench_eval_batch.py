"""The evaluation batch: CPU time of one evaluation at each batch, and whether its floats move.

One evaluation (``adloco.model.llama.evaluate``) of the preset's
``train.eval_sequences`` at each candidate batch, in one process per numerics
mode (the libraries read the mode when they load), all batches interleaved in a
fresh random order per repeat, each figure the fastest repeat, timed in the
process's CPU seconds (another job on the machine disturbs them less than the
wall clock). The model is the preset's at its seeded initialisation on seeded
random tokens, or with ``--base`` a pretrained base folder (``base.json``
beside its model) on the validation split of ``--data``, as the runs evaluate
it. Every batch's loss, standard error and per-sequence sums are compared with
the first candidate's to the bit: a batch whose floats differ says so.

Usage: .venv/bin/python benchmarks/bench_eval_batch.py [--config config/config.yaml]
       [--batches 64,32,16,8] [--repeats 5] [--modes fast,portable] [--threads 1]
       [--base results/default/base --data data/default/tokenized]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path


def sample(args: argparse.Namespace):
    """The model and the sequences one evaluation sees."""
    import torch

    from adloco.config import load_config
    from adloco.model.llama import build_model, evaluation_sample, load_pretrained

    config = load_config(args.config)
    settings = config.run(next(iter(config.runs)))
    if args.base:
        from adloco.data.reader import TokenData

        base = json.loads((Path(args.base) / "base.json").read_text())
        model = load_pretrained(str(Path(args.base) / base["model_dir"]), torch.float32)
        data = TokenData.open(args.data)
        return model, evaluation_sample(data.split("validation"), settings.eval_sequences)
    vocab, seq_len = config.data.tokenizer.vocab_size, config.data.seq_len_tokens
    model = build_model(config.model, vocab, seq_len, config.seed)
    gen = torch.Generator().manual_seed(0)
    return model, torch.randint(0, vocab, (settings.eval_sequences, seq_len), generator=gen)


def child(args: argparse.Namespace) -> None:
    """Every batch in this process's mode; one JSON line."""
    from adloco.core import numerics

    numerics.pin(args.threads)
    import torch

    from adloco.model.llama import evaluate

    torch.set_num_threads(args.threads)
    model, seqs = sample(args)
    batches = [int(b) for b in args.batches.split(",")]
    cpu = {b: float("inf") for b in batches}
    floats = {}
    for b in batches:  # untimed: the first dispatch of each shape
        evaluate(model, seqs, b)
    for _ in range(args.repeats):
        for b in random.sample(batches, len(batches)):
            start = time.process_time()
            got = evaluate(model, seqs, b)
            cpu[b] = min(cpu[b], time.process_time() - start)
            floats[b] = hashlib.sha256(repr(sorted(got.items())).encode()).hexdigest()[:12]
            floats[b] += f" loss {got['loss']!r}"
    record = numerics.record()
    print(json.dumps({"cpu": cpu, "floats": floats, "mkl_cbwr": record["environment"]["MKL_CBWR"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--batches", default="64,32,16,8", help="the first is the baseline")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--modes", default="fast,portable")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--base", default=None, help="a pretrained base folder (base.json)")
    ap.add_argument("--data", default=None, help="the tokenized data of --base")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if args.base and not args.data:
        ap.error("--base needs --data (its tokenized folder)")
    argv = [sys.executable, __file__, "--child", *sys.argv[1:]]
    batches = [int(b) for b in args.batches.split(",")]
    what = f"base {args.base}" if args.base else "seeded initialisation, random tokens"
    print(f"one evaluation, {what}, {args.threads} thread(s), fastest of {args.repeats}")
    for mode in args.modes.split(","):
        env = {**os.environ, "ADLOCO_NUMERICS": mode}
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        got = json.loads(out.stdout.strip().splitlines()[-1])
        cpu = {int(k): v for k, v in got["cpu"].items()}
        floats = {int(k): v for k, v in got["floats"].items()}
        print(f"{mode} (MKL_CBWR {got['mkl_cbwr']}):")
        for b in batches:
            same = "same floats" if floats[b] == floats[batches[0]] else "OTHER FLOATS"
            print(
                f"  eval_batch {b:3d}  {cpu[b]:.3f} CPU s  {cpu[b] / cpu[batches[0]]:.2f}x "
                f"batch {batches[0]}'s  {same}  ({floats[b]})"
            )


if __name__ == "__main__":
    main()

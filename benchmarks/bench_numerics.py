"""The cost of each numerics mode: training and evaluation, fast and portable against native.

Prints ratios measured in one run on the same model, batch and thread count,
of the plain AdamW loop of ``bench_engine.py`` (forward, backward, clip, step
of the default model on seeded random tokens) and of one evaluation
(``adloco.model.llama.evaluate`` of the default's ``eval_sequences`` at its
``eval_batch``), under each mode of ``ADLOCO_NUMERICS`` (adloco.core.numerics):

1. ``native``: the machine's own paths (the baseline);
2. ``fast``: the default, every free pin, MKL's GEMM on its ``AUTO`` branch;
3. ``portable``: the same with ``MKL_CBWR=COMPATIBLE``, the same floats on Intel and AMD.

Each variant runs in its own process, since the libraries read the settings
when they load. Every repeat runs all variants in a fresh random order
(interleaved) and the ratios use the fastest repeat of each (the one least
disturbed by other work on the machine). Speeds are given per second of the
process's CPU time, which another job on the machine disturbs less than the
wall clock (at one thread the two are equal on a quiet machine), and per
wall second beside. Each variant's final weights are hashed: variants with
the same hash computed the same floats.

Usage: .venv/bin/python benchmarks/bench_numerics.py [--config config/config.yaml]
       [--batch 8] [--steps 10] [--repeats 5] [--threads 1]
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

HERE = Path(__file__).resolve().parent
MODES = ("native", "fast", "portable")


def variants() -> dict[str, dict[str, str]]:
    """Variant name -> the environment its process starts with (its mode)."""
    return {mode: {"ADLOCO_NUMERICS": mode} for mode in MODES}


def child(args: argparse.Namespace) -> None:
    """One timed plain loop, pinned first as adloco.cli.main does; one JSON line."""
    from adloco.core import numerics

    numerics.pin(args.threads)
    import torch

    sys.path.insert(0, str(HERE))
    from adloco.config import load_config
    from adloco.model.llama import build_model, evaluate
    from bench_engine import plain_loop

    torch.set_num_threads(args.threads)
    config = load_config(args.config)
    settings = config.run(next(iter(config.runs)))
    vocab, seq_len = config.data.tokenizer.vocab_size, config.data.seq_len_tokens
    gen = torch.Generator().manual_seed(0)
    data = torch.randint(0, vocab, (args.steps + 1, args.batch, seq_len), generator=gen)
    model = build_model(config.model, vocab, seq_len, 0)
    params = list(model.parameters())
    device = torch.device("cpu")

    def autocast():
        return torch.autocast("cpu", enabled=False)

    # One untimed step first (allocations, first dispatch), then the timed ones.
    plain_loop(model, params, list(data[:1]), settings, device, autocast)
    cpu = time.process_time()
    seconds = plain_loop(model, params, list(data[1:]), settings, device, autocast)
    train_cpu = time.process_time() - cpu
    evals = torch.randint(0, vocab, (settings.eval_sequences, seq_len), generator=gen)
    evaluate(model, evals, settings.eval_batch)  # untimed, as above
    wall, cpu = time.perf_counter(), time.process_time()
    val = evaluate(model, evals, settings.eval_batch)
    eval_wall, eval_cpu = time.perf_counter() - wall, time.process_time() - cpu
    digest = hashlib.sha256()
    for p in params:
        digest.update(p.detach().numpy().tobytes())
    record = numerics.record()
    print(
        json.dumps(
            {
                "tokens_per_s": data[1:].numel() / seconds,
                "tokens_per_cpu_s": data[1:].numel() / train_cpu,
                "eval_tokens_per_s": evals.numel() / eval_wall,
                "eval_tokens_per_cpu_s": evals.numel() / eval_cpu,
                "eval_loss": val["loss"],
                "weights": digest.hexdigest()[:12],
                "cpu_capability": record["cpu_capability"],
                "mkl_cbwr": record["environment"]["MKL_CBWR"],
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10, help="timed optimizer steps")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    from adloco.core import numerics

    unset = (numerics.MODE_VARIABLE, *numerics.VARIABLES)
    base = {k: v for k, v in os.environ.items() if k not in unset}
    runs = variants()
    keys = ("tokens_per_s", "tokens_per_cpu_s", "eval_tokens_per_s", "eval_tokens_per_cpu_s")
    best: dict[str, dict] = {}
    argv = [sys.executable, __file__, "--child", "--config", args.config]
    argv += ["--batch", str(args.batch), "--steps", str(args.steps)]
    argv += ["--threads", str(args.threads)]
    start = time.perf_counter()
    for _ in range(args.repeats):
        for name in random.sample(list(runs), len(runs)):
            env = {**base, **runs[name]}
            out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
            got = json.loads(out.stdout.strip().splitlines()[-1])
            if name not in best:
                best[name] = got
            for key in keys:  # each figure's fastest repeat
                best[name][key] = max(best[name][key], got[key])
    native = best["native"]
    print(
        f"default model, {args.threads} thread(s), fastest of {args.repeats} interleaved "
        f"repeats ({time.perf_counter() - start:.0f} s in all); tokens per CPU second "
        "(per wall second in brackets)"
    )
    print(f"training loop, batch {args.batch}, {args.steps} steps:")
    for name in runs:
        got = best[name]
        print(
            f"  {name:9s} {got['tokens_per_cpu_s']:8.0f} ({got['tokens_per_s']:6.0f}) tokens/s  "
            f"{got['tokens_per_cpu_s'] / native['tokens_per_cpu_s']:.2f}x native "
            f"({got['tokens_per_s'] / native['tokens_per_s']:.2f}x)  ATen "
            f"{got['cpu_capability']:7s} MKL_CBWR {got['mkl_cbwr']}  weights {got['weights']}"
        )
    print("one evaluation (the preset's eval_sequences at its eval_batch):")
    for name in runs:
        got = best[name]
        print(
            f"  {name:9s} {got['eval_tokens_per_cpu_s']:8.0f} ({got['eval_tokens_per_s']:6.0f}) "
            f"tokens/s  {got['eval_tokens_per_cpu_s'] / native['eval_tokens_per_cpu_s']:.2f}x "
            f"native ({got['eval_tokens_per_s'] / native['eval_tokens_per_s']:.2f}x)  "
            f"loss {got['eval_loss']!r}"
        )


if __name__ == "__main__":
    main()

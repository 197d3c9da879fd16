"""The cost of the pinned CPU numerics: the plain training loop, pinned against unpinned.

Prints ratios measured in one run on the same model, batch and thread count:
tokens/s of the plain AdamW loop of ``bench_engine.py`` (forward, backward,
clip, step of the default model on seeded random tokens) under

1. ``native``: ``ADLOCO_NUMERICS=native``, the machine's own paths (the baseline);
2. ``pinned``: what every ``adloco`` command runs under (adloco.core.numerics);
3. ``pinned, MKL AVX2 branch``: the same with ``MKL_CBWR=AVX2``, the faster MKL
   branch, which MKL honours on Intel CPUs only (on AMD it runs ``AUTO``);
4. ``ATen avx2 only``: ATen's AVX2 kernels, MKL and oneDNN left to choose.

Each variant runs in its own process, since the libraries read the settings
when they load. Every repeat runs all variants in a fresh random order and the
ratios use the fastest repeat of each (the one least disturbed by other work on
the machine). Each variant's final weights are hashed: variants with the same
hash computed the same floats.

Usage: .venv/bin/python benchmarks/bench_numerics.py [--config config/config.yaml]
       [--batch 8] [--steps 10] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NATIVE = {"ADLOCO_NUMERICS": "native"}


def variants(threads: int) -> dict[str, dict[str, str]]:
    """Variant name -> the environment its process starts with."""
    from adloco.core import numerics

    pinned = numerics.pinned_environment(numerics.cpu_flags(), platform.machine(), threads)
    return {
        "native": NATIVE,
        "pinned": {},
        "pinned, MKL AVX2 branch": {**NATIVE, **pinned, "MKL_CBWR": "AVX2"},
        "ATen avx2 only": {**NATIVE, "ATEN_CPU_CAPABILITY": pinned["ATEN_CPU_CAPABILITY"]},
    }


def child(args: argparse.Namespace) -> None:
    """One timed plain loop, pinned first as adloco.cli.main does; one JSON line."""
    from adloco.core import numerics

    numerics.pin(args.threads)
    import torch

    sys.path.insert(0, str(HERE))
    from adloco.config import load_config
    from adloco.model.llama import build_model
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
    seconds = plain_loop(model, params, list(data[1:]), settings, device, autocast)
    digest = hashlib.sha256()
    for p in params:
        digest.update(p.detach().numpy().tobytes())
    record = numerics.record()
    print(
        json.dumps(
            {
                "tokens_per_s": data[1:].numel() / seconds,
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
    runs = variants(args.threads)
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
            if name not in best or got["tokens_per_s"] > best[name]["tokens_per_s"]:
                best[name] = got
    baseline = best["native"]["tokens_per_s"]
    print(
        f"plain loop, default model, batch {args.batch}, {args.steps} steps, "
        f"{args.threads} thread(s), fastest of {args.repeats} "
        f"({time.perf_counter() - start:.0f} s in all)"
    )
    for name in runs:
        got = best[name]
        print(
            f"  {name:26s} {got['tokens_per_s']:9.0f} tokens/s  "
            f"{got['tokens_per_s'] / baseline:.2f}x native  ATen {got['cpu_capability']:7s} "
            f"MKL_CBWR {got['mkl_cbwr']}  weights {got['weights']}"
        )


if __name__ == "__main__":
    main()

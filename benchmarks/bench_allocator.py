"""Training passes with freed memory kept in the process (engine.allocator) against glibc's default.

Every repeat starts two fresh processes, one calling
:func:`adloco.engine.allocator.keep_freed_memory` first and one not, in a random
order; each builds the configuration's model, runs ``--steps`` training passes
(forward, backward, AdamW) at ``--batch`` sequences and ``--evals``
evaluations of ``train.eval_sequences`` sequences, as a training job does,
and reports its time and minor page faults. Prints the fastest repeat of each
and their ratio (goal: kept / default < 0.95 on the default configuration),
and checks that both computed the same losses to the bit.

Usage: .venv/bin/python benchmarks/bench_allocator.py [--config config/config.yaml]
       [--batch 4] [--steps 200] [--evals 10] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import time


def workload(args: argparse.Namespace) -> dict:
    """One process's passes; the allocator setting is made before torch allocates."""
    from adloco.engine import allocator

    kept = allocator.keep_freed_memory() if args.child == "keep" else False
    import torch

    from adloco.config import load_config
    from adloco.model.llama import batch_loss, build_model, evaluate

    torch.set_num_threads(args.threads)
    config = load_config(args.config)
    vocab, seq_len = config.data.tokenizer.vocab_size, config.data.seq_len_tokens
    model = build_model(config.model, vocab, seq_len, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(0)
    batches = torch.randint(0, vocab, (args.steps, args.batch, seq_len), generator=generator)
    held_out = torch.randint(0, vocab, (config.train.eval_sequences, seq_len), generator=generator)
    losses = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    for step, batch in enumerate(batches):
        loss_sum, count = batch_loss(model, batch)
        (loss_sum / count).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss_sum))
        if (step + 1) % max(1, args.steps // max(args.evals, 1)) == 0:
            losses.append(evaluate(model, held_out, config.train.eval_batch)["loss"])
    seconds = time.perf_counter() - start
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {"kept": kept, "seconds": seconds, "faults": faults, "losses": losses}


def measure(args: argparse.Namespace, mode: str) -> dict:
    argv = [sys.executable, __file__, "--child", mode, "--config", args.config,
            "--batch", str(args.batch), "--steps", str(args.steps), "--evals", str(args.evals),
            "--threads", str(args.threads)]  # fmt: skip
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--batch", type=int, default=4, help="sequences per training pass")
    parser.add_argument("--steps", type=int, default=200, help="training passes per process")
    parser.add_argument("--evals", type=int, default=10, help="evaluations per process")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", choices=("keep", "default"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(workload(args)))
        return
    results: dict[str, list[dict]] = {"keep": [], "default": []}
    for _ in range(args.repeats):
        for mode in random.sample(list(results), k=2):
            results[mode].append(measure(args, mode))
    best = {mode: min(runs, key=lambda r: r["seconds"]) for mode, runs in results.items()}
    for mode, run in best.items():
        print(f"{mode:>8}: {run['seconds']:.2f} s, {run['faults']:,} minor page faults "
              f"(setting applied: {run['kept']})")  # fmt: skip
    same = all(r["losses"] == best["default"]["losses"] for runs in results.values() for r in runs)
    print(f"kept / default time: {best['keep']['seconds'] / best['default']['seconds']:.3f} "
          f"(goal < 0.95); losses identical to the bit: {same}")  # fmt: skip


if __name__ == "__main__":
    main()

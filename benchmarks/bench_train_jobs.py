"""A run's seeds trained as one job per seed against one job per run (``--seed all``).

What ``snakemake.train_jobs`` chooses between. Each repeat trains the same
seeds of ``--run`` twice, in a random order and one process at a time: once
as one ``adloco train --seed <s>`` process per seed (``train_jobs: seed``),
once as a single ``adloco train --seed all`` (``train_jobs: run``). Prints the
wall time of each (the fastest repeat) and their ratio, then checks that both
wrote the same metrics to the bit, wall time aside.

It trains on what ``make run`` made (the tokenized corpus, the calibration
and the base model), so run it after ``make run``:

Usage: .venv/bin/python benchmarks/bench_train_jobs.py [--config config/config.yaml]
       [--run diloco-matched-comms] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from adloco.config import load_config
from adloco.core import paths

ADLOCO = str(Path(sys.executable).with_name("adloco"))


def train(args, config, seed: str, out: Path, checkpoints: Path) -> None:
    exp = config.experiment
    command = [
        ADLOCO, "train", "--config", args.config, "--run-name", args.run, "--seed", seed,
        "--data", str(paths.tokenized_dir(config.data.dataset)),
        "--calibration", str(paths.calibration_dir(exp)),
        "--out", str(out), "--checkpoints", str(checkpoints), "--threads", "1", "--no-progress",
    ]  # fmt: skip
    if config.model.source == "base":
        command += ["--base", str(paths.base_dir(exp))]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def per_seed(args, config, seeds: list[int], folder: Path) -> float:
    start = time.perf_counter()
    for seed in seeds:
        name = paths.seed_dir_name(seed)
        train(args, config, str(seed), folder / "out" / name, folder / "ckpt" / name)
    return time.perf_counter() - start


def per_run(args, config, seeds: list[int], folder: Path) -> float:
    start = time.perf_counter()
    train(args, config, "all", folder / "out", folder / "ckpt")
    return time.perf_counter() - start


def rows(folder: Path, seed: int) -> list[dict]:
    path = folder / "out" / paths.seed_dir_name(seed) / "metrics.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in lines]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="config/config.yaml")
    parser.add_argument("--run", default="diloco-matched-comms", help="a run with several seeds")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args(argv)
    config = load_config(args.config)
    seeds = config.run_seeds(args.run)
    if len(seeds) < 2:
        parser.error(f"runs.{args.run} has {len(seeds)} seed: pick a run with several")
    modes = {"seed": per_seed, "run": per_run}
    best = dict.fromkeys(modes, float("inf"))
    work = Path(tempfile.mkdtemp(prefix="bench-train-jobs-"))
    try:
        for _ in range(args.repeats):
            for mode in random.sample(list(modes), len(modes)):
                folder = work / mode
                shutil.rmtree(folder, ignore_errors=True)
                best[mode] = min(best[mode], modes[mode](args, config, seeds, folder))
        same = all(rows(work / "seed", s) == rows(work / "run", s) for s in seeds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.run}, seeds {seeds}, fastest of {args.repeats} repeat(s), wall time:")
    print(f"  a job per seed (train_jobs: seed)  {best['seed']:8.1f} s")
    print(f"  a job per run  (train_jobs: run)   {best['run']:8.1f} s")
    print(f"  ratio run / seed                   {best['run'] / best['seed']:8.3f}")
    print(f"  metrics identical but for wall time: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
